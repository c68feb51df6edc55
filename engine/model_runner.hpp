// The forward pass on the CPU: the only code that touches weights, activations and the KV cache
// there. Every buffer is allocated here, once; forward() allocates nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/config.hpp"
#include "engine/kv_cache.hpp"
#include "engine/runner.hpp"
#include "engine/weights.hpp"
#include "kernels/team.hpp"

namespace anvil::engine {

class ModelRunner final : public Runner {
public:
    ModelRunner(const ModelConfig& config, const ModelWeights& weights, const RunnerOptions& options);
    ModelRunner(const ModelRunner&) = delete;
    ModelRunner& operator=(const ModelRunner&) = delete;

    void forward(const Batch& batch, int exit_after = 0) override;
    const float* logits(int i) const override { return logits_.data() + size_t(i) * config_.vocab_size; }

    const ModelConfig& config() const override { return config_; }
    const RunnerOptions& options() const override { return options_; }
    size_t kv_bytes() const override { return kv_.bytes(); }
    std::string device() const override { return "cpu"; }
    const KvCache& kv_cache() const { return kv_; }

private:
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
    // A team's other threads' own copies of the two: [threads - 1][team tokens][dim] (run_layers).
    std::vector<float> team_x_, team_xb_;
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
