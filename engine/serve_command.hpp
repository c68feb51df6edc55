// `anvil-engine serve`: bind first (so /health answers 503 while loading), load, then serve.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace anvil::engine {

struct ServeOptions {
    std::filesystem::path model_dir;
    std::string host = "127.0.0.1";
    int port = 8000;
    std::string served_model_name;  // default: the model directory's name
    int max_context = 2048;
    int max_seqs = 4;
    int threads = 0;  // 0: every core
    std::string weights = "stored";
    std::string kv_dtype = "f32";
    uint64_t seed = 0;
    int kv_blocks = 0;
    int max_batch_tokens = 256;
    std::string api_key;  // --api-key, or ANVIL_ENGINE_API_KEY (which ps does not show)
};

// Runs until SIGINT or SIGTERM; returns the exit status.
int serve(const ServeOptions& options);

}  // namespace anvil::engine
