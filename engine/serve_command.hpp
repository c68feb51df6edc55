// `anvil-engine serve`: bind first (so /health answers 503 while loading), load, then serve.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "engine/draft.hpp"

namespace anvil::engine {

struct ServeOptions {
    std::filesystem::path model_dir;  // a Hugging Face directory or a GGUF file
    std::string host = "127.0.0.1";
    int port = 8000;
    std::string served_model_name;  // default: the model directory's name, or the GGUF file's stem
    int max_context = 0;  // 0: the model's own context length
    int max_seqs = 4;
    int threads = 0;  // 0: every core
    std::string weights = "stored";
    std::string kv_dtype = "f32";
    uint64_t seed = 0;
    int kv_blocks = 0;
    int max_batch_tokens = 256;
    bool prefix_caching = true;  // --prefix-caching on|off
    std::string device = "cpu";         // --device cpu|cuda|cuda:N
    double gpu_memory_utilization = 0.9;  // --gpu-memory-utilization F (with --device cuda:N)
    std::string api_key;  // --api-key, or ANVIL_ENGINE_API_KEY (which ps does not show)
    // Speculative decoding: at most one of these draft kinds.
    std::string draft_self;           // --draft-self q8|bf16
    std::filesystem::path draft_model;  // --draft-model DIR
    std::string draft_weights;        // --draft-weights f32|bf16|q8|stored (with --draft-model)
    int draft_layers = 0;             // --draft-layers N
    int draft_ngram = 0;              // --draft-ngram N
    int draft_tokens = 4;             // --draft-tokens K
};

// The draft the flags ask for; throws std::invalid_argument naming the flags that conflict.
DraftOptions draft_options(const ServeOptions& options);

// Runs until SIGINT or SIGTERM; returns the exit status.
int serve(const ServeOptions& options);

}  // namespace anvil::engine
