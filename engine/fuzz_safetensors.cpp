// Fuzzes the safetensors header check: model files are untrusted input (downloaded, or named by a
// registry recipe), and every tensor the engine reads is trusted once this check passes. Any bytes
// must give either tensors that lie inside the image or std::runtime_error; another exception, a
// crash or undefined behaviour is a bug.
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "engine/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    try {
        const auto tensors = anvil::engine::parse_safetensors(data, size, "fuzz.safetensors");
        for (const auto& t : tensors) {
            // What the loader relies on: the bytes are inside the image and match the shape.
            if (t.data < data || t.data + t.bytes > data + size) __builtin_trap();
            if (t.dtype != anvil::engine::Dtype::Other &&
                std::size_t(t.elements()) * anvil::engine::dtype_size(t.dtype) != t.bytes)
                __builtin_trap();
        }
    } catch (const std::runtime_error&) {
    }
    return 0;
}
