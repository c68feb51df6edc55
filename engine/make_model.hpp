// make-model: writes a complete Hugging Face model directory with random weights and a small
// byte-level BPE tokenizer, the same bytes for the same options. The engine's tests and
// benchmarks run on these, and the example registry's embedded recipes name the `small` one.
#pragma once

#include <filesystem>
#include <string>

namespace anvil::engine {

struct MakeModelOptions {
    std::filesystem::path out;
    std::string preset = "tiny";  // tiny | small | bench
    std::string arch = "llama";   // llama | qwen2 | qwen3 | mistral
    std::string dtype = "f32";    // f32 | bf16 | f16: how the weights are stored
    uint64_t seed = 1;
    int shards = 1;               // >1 writes model-0000i-of-0000n.safetensors and the index
};

// Creates `out` (which must not exist or be empty). Returns the bytes of weights written.
size_t make_model(const MakeModelOptions& options);

}  // namespace anvil::engine
