// Fuzzes tokenizer.json: a model directory's tokenizer is untrusted input like its weights. Any
// bytes must give a tokenizer or std::runtime_error; a tokenizer must then encode any text to ids
// inside its vocabulary and decode them. Another exception, a crash or undefined behaviour is a bug.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace anvil::engine;
    const std::string text(reinterpret_cast<const char*>(data), size);
    const auto doc = nlohmann::json::parse(text, nullptr, false);
    if (doc.is_discarded()) return 0;
    try {
        const Tokenizer tok(doc, nlohmann::json::object(), "fuzz.json");
        for (const std::string& sample : {std::string("Hello world  <s>x\n\t\xC3\xA9\xF0\x9F\x98\x80"), text.substr(0, 256)}) {
            for (int32_t id : tok.encode(sample, true))
                if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
            (void)tok.decode(tok.encode(sample), false);
        }
    } catch (const std::runtime_error&) {
    }
    return 0;
}
