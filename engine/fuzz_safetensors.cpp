// libFuzzer target: the safetensors header parser on arbitrary bytes must throw or succeed, never
// read outside the image.
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "engine/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        auto tensors = anvil::engine::parse_safetensors(data, size, "fuzz");
        volatile uint8_t sink = 0;
        for (const auto& t : tensors)
            if (t.bytes) sink = sink ^ t.data[t.bytes - 1];
    } catch (const std::runtime_error&) {
    }
    return 0;
}
