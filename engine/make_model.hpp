// make-model: writes a complete Hugging Face model directory with random weights and a small
// BPE tokenizer (byte-level, or SentencePiece-style), the same bytes for the same options. The engine's tests and
// benchmarks run on these, and the example registry's embedded recipes name the `small` one.
#pragma once

#include <filesystem>
#include <string>

namespace anvil::engine {

struct MakeModelOptions {
    std::filesystem::path out;    // a directory, or FILE.gguf for one GGUF file (gguf_convert.hpp)
    std::string preset = "tiny";  // tiny | small | bench
    std::string arch = "llama";   // llama | qwen2 | qwen3 | mistral
    std::string dtype = "f32";    // f32 | bf16 | f16, and q8_0, q4_0, q4_k_m, q6_k in GGUF
    uint64_t seed = 1;
    int shards = 1;               // >1 writes model-0000i-of-0000n.safetensors and the index
    // >0: the layers past the first `early_exit` only make small corrections (their attention and
    // MLP outputs scaled down), as in a model trained for early exit (LayerSkip): its first
    // `early_exit` layers, final norm and LM head already predict most of its greedy tokens, and
    // `serve --draft-layers` on it shows what self-speculation gains. 0 writes the same bytes as before.
    int early_exit = 0;
    // >0: this many layers instead of the preset's. Every tensor is drawn from a stream named after
    // it, so a model with fewer layers is exactly the first layers of a deeper one of the same
    // preset and seed: with --layers N it is the --early-exit N model's own early exit as a second
    // model, a draft for `serve --draft-model`.
    int layers = 0;
    // byte-level | sentencepiece: the tokenizer's kind. sentencepiece (mistral only) writes Mistral
    // 7B's: <unk> <s> </s>, <0xXX> byte fallback, text with the metaspace, Llama 2's normalizer and
    // decoder; a GGUF of it carries the `llama` vocabulary.
    std::string vocab = "byte-level";
};

// Creates `out` (which must not exist or be empty). Returns the bytes of weights written.
size_t make_model(const MakeModelOptions& options);

}  // namespace anvil::engine
