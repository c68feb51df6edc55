// The forward pass: the only code that touches weights, activations and the KV cache. It computes
// a batch of tokens from any mix of sequences (prefill chunks and decode steps alike) and the
// logits of the tokens asked for. Every buffer is allocated here, once; forward() allocates nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/config.hpp"
#include "engine/kv_cache.hpp"
#include "engine/weights.hpp"
#include "kernels/team.hpp"

namespace anvil::engine {

// One step's tokens. Vectors are reused between steps: clear() keeps their capacity.
struct Batch {
    std::vector<int32_t> tokens;     // [n]
    std::vector<int32_t> positions;  // [n] position of each token in its sequence
    std::vector<int32_t> sequence;   // [n] index into block_tables
    std::vector<const int32_t*> block_tables;  // per sequence: its blocks, in position order
    std::vector<int32_t> logit_tokens;  // indices into tokens whose logits are wanted, in order

    // Capacity for `tokens` tokens of up to `sequences` sequences and `logit_rows` logits rows, so
    // that filling it during decoding never allocates.
    void reserve(int max_tokens, int sequences, int logit_rows) {
        tokens.reserve(size_t(max_tokens));
        positions.reserve(size_t(max_tokens));
        sequence.reserve(size_t(max_tokens));
        block_tables.reserve(size_t(sequences));
        logit_tokens.reserve(size_t(logit_rows));
    }
    void clear() {
        tokens.clear();
        positions.clear();
        sequence.clear();
        block_tables.clear();
        logit_tokens.clear();
    }
    int size() const { return int(tokens.size()); }
};

struct RunnerOptions {
    int max_batch_tokens = 256;  // tokens one forward() may carry
    int max_logit_rows = 16;     // logits one forward() may return
    int max_context = 2048;      // positions per sequence
    int kv_blocks = 0;           // blocks in the cache
    int block_size = 16;
    kernels::KvType kv_type = kernels::KvType::F32;
    int threads = 0;             // OpenMP threads; 0: omp_get_max_threads() of the constructing thread
};

class ModelRunner {
public:
    ModelRunner(const ModelConfig& config, const ModelWeights& weights, const RunnerOptions& options);
    ModelRunner(const ModelRunner&) = delete;
    ModelRunner& operator=(const ModelRunner&) = delete;

    // Writes the batch's keys and values into the cache slots its block tables name, and fills
    // logits(i) for the i-th entry of batch.logit_tokens. `exit_after` > 0 stops after that many
    // layers (an early exit: the draft of --draft-layers): only those layers' keys and values are
    // written, and the logits come from the final norm and LM head applied there.
    void forward(const Batch& batch, int exit_after = 0);
    const float* logits(int i) const { return logits_.data() + size_t(i) * config_.vocab_size; }

    const ModelConfig& config() const { return config_; }
    const RunnerOptions& options() const { return options_; }
    const KvCache& kv_cache() const { return kv_; }

private:
    void check(const Batch& batch) const;
    void run_layers(const Batch& batch, int layers);

    const ModelConfig& config_;
    const ModelWeights& weights_;
    RunnerOptions options_;
    KvCache kv_;
    int threads_;
    std::unique_ptr<kernels::Team> team_;  // the threads of a short batch's pass; none for one thread

    std::vector<float> rope_cos_;  // [max_context][head_dim / 2]
    std::vector<float> rope_sin_;  // [max_context][head_dim / 2]
    std::vector<float> x_;         // [max_batch_tokens][dim] the residual stream
    std::vector<float> xb_;        // [max_batch_tokens][dim] normed input of a block
    std::vector<float> xb2_;       // [max_batch_tokens][dim] a block's output
    std::vector<float> q_;         // [max_batch_tokens][q_dim]
    std::vector<float> k_;         // [max_batch_tokens][kv_dim]
    std::vector<float> v_;         // [max_batch_tokens][kv_dim]
    std::vector<float> att_;       // [max_batch_tokens][q_dim]
    std::vector<float> hb_;        // [max_batch_tokens][hidden_dim]
    std::vector<float> hb2_;       // [max_batch_tokens][hidden_dim]
    std::vector<float> scores_;    // [threads][4][max_context] attention weights
    std::vector<float> final_;     // [max_logit_rows][dim]
    std::vector<float> logits_;    // [max_logit_rows][vocab]
};

}  // namespace anvil::engine
