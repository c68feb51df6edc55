// Fuzzes NFC normalisation, which runs on every request's text before tokenizing: any bytes, valid
// UTF-8 or not, must normalise without a crash, and the result must be a fixed point (NFC of NFC
// changes nothing) and equal to the input wherever nfc_inert() promised it would be.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/unicode_nfc.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const std::string once = anvil::engine::nfc_normalize(text);
    if (anvil::engine::nfc_inert(text) && once != text) __builtin_trap();
    if (anvil::engine::nfc_normalize(once) != once) __builtin_trap();
    return 0;
}
