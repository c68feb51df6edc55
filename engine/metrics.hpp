// Counters and gauges for GET /metrics, in Prometheus text format. Written by the engine and
// HTTP threads, read by the scrape: all atomics.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace anvil::engine {

struct Metrics {
    std::atomic<uint64_t> requests_ok{0};
    std::atomic<uint64_t> requests_rejected{0};  // 4xx
    std::atomic<uint64_t> requests_aborted{0};   // the client went away
    std::atomic<uint64_t> prompt_tokens{0};
    std::atomic<uint64_t> generation_tokens{0};
    std::atomic<uint64_t> engine_steps{0};
    std::atomic<uint64_t> preemptions{0};
    std::atomic<int64_t> running{0};
    std::atomic<int64_t> waiting{0};
    std::atomic<int64_t> kv_blocks_used{0};
    std::atomic<int64_t> kv_blocks_total{0};
    std::atomic<int64_t> kv_blocks_cached{0};          // free blocks still holding a cached prefix
    std::atomic<uint64_t> prefix_cache_queries{0};     // prompt tokens looked up in the prefix cache
    std::atomic<uint64_t> prefix_cache_hits{0};        // of them, found there (not computed)
    std::atomic<uint64_t> forward_microseconds{0};
    std::atomic<uint64_t> constrained_tokens{0};       // tokens sampled under a response_format grammar
    std::atomic<uint64_t> constraint_microseconds{0};  // time computing their masks
    // GPU memory the runners hold (weights, working memory, KV cache); 0 on the CPU, where the
    // series is left out. Set before serving.
    std::atomic<uint64_t> gpu_memory_bytes{0};

    // Speculative decoding, reported only when the engine has a draft. Set before serving.
    std::string draft_kind = "none";
    std::atomic<uint64_t> draft_proposed{0};       // draft tokens verified
    std::atomic<uint64_t> draft_accepted{0};       // of them, kept
    std::atomic<uint64_t> draft_verifications{0};  // sequences' verifications
    std::atomic<uint64_t> draft_microseconds{0};   // time proposing

    std::string prometheus_text(const std::string& model_name) const;
};

}  // namespace anvil::engine
