// Fuzzes the GGUF reader and what the engine reads from its metadata: model files are untrusted
// input (downloaded, or named by a registry recipe). Any bytes must give a header whose tensors lie
// inside the image, and a configuration and a tokenizer that encodes into its vocabulary, or
// std::runtime_error; another exception, a crash or undefined behaviour is a bug.
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "engine/gguf_model.hpp"
#include "engine/tokenizer.hpp"
#include "formats/gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace anvil::engine;
    namespace formats = anvil::formats;
    formats::GgufImage image;
    try {
        image = formats::parse_gguf(data, size, "fuzz.gguf");
    } catch (const std::runtime_error&) {
        return 0;
    }
    for (const auto& t : image.tensors) {
        if (t.data < data || t.data + t.bytes > data + size) __builtin_trap();
        const formats::GgmlTypeInfo* info = formats::ggml_type_info(t.type);
        if (!info || std::size_t(t.elements()) / std::size_t(info->block) * std::size_t(info->block_bytes) != t.bytes)
            __builtin_trap();
    }
    try {
        const ModelConfig c = gguf_config(image, "fuzz.gguf");
        if (c.dim <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.head_dim <= 0 || c.vocab_size < 0) __builtin_trap();
    } catch (const std::runtime_error&) {
    }
    try {
        const auto [doc, config] = gguf_tokenizer_documents(image, "fuzz.gguf");
        const Tokenizer tok(doc, config, "fuzz.gguf");
        for (int32_t id : tok.encode("Hello world  <s>x\n\t\xC3\xA9\xF0\x9F\x98\x80", true))
            if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
    } catch (const std::runtime_error&) {
    }
    return 0;
}
