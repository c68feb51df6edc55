// The forward pass on one GPU (kernels/cuda), behind the same Runner interface as the CPU's, so the
// scheduler, block manager, sampler and server are the CPU engine's own. The weights go up once
// (through pinned staging); the paged KV cache and every activation live in device memory; each
// step copies the batch's indices up and the wanted logits back through pinned memory, and a batch
// of decode size replays one captured CUDA graph for its shape instead of launching ~15 kernels a
// layer. Built only with the CUDA toolkit (ANVIL_HAVE_CUDA_KERNELS).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "engine/runner.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/matmul.hpp"

namespace anvil::engine {

class CudaModelRunner final : public Runner {
public:
    // options.kv_blocks 0: the cache takes what options.memory_fraction of the device leaves once
    // the weights, the activations and options' companion are counted. Throws std::runtime_error in
    // one line when the weights' format has no CUDA kernel, or the fraction leaves no room for one
    // full context. `weights_of`: a CUDA runner on the same device made from these same `weights`,
    // whose device copy this one reads instead of uploading its own.
    CudaModelRunner(int device, const ModelConfig& config, const ModelWeights& weights, const RunnerOptions& options,
                    const Runner* weights_of = nullptr);
    ~CudaModelRunner() override;
    CudaModelRunner(const CudaModelRunner&) = delete;
    CudaModelRunner& operator=(const CudaModelRunner&) = delete;

    void forward(const Batch& batch, int exit_after = 0) override;
    const float* logits(int i) const override { return logits_host_.data() + size_t(i) * size_t(config_.vocab_size); }
    int32_t argmax(int i) const override { return argmax_host_.data()[i]; }

    const ModelConfig& config() const override { return config_; }
    const RunnerOptions& options() const override { return options_; }
    size_t kv_bytes() const override { return kv_bytes_; }
    size_t device_bytes() const override { return (owns_model_ ? model_->bytes : 0) + working_bytes_ + kv_bytes_; }
    std::string device() const override { return device_name_; }

    // Batches of at most this many tokens (decode steps, speculative verification) run as graphs.
    static constexpr int kGraphTokens = 64;

private:
    struct Layer {
        const float *attn_norm = nullptr, *ffn_norm = nullptr;
        const float *bq = nullptr, *bk = nullptr, *bv = nullptr;
        const float *q_norm = nullptr, *k_norm = nullptr;
        kernels::WeightMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
    };
    // The weights on one device: uploaded by one runner, read by every runner made from the same
    // ModelWeights (a self draft), freed with the last of them.
    struct DeviceModel {
        // What they were uploaded from: compared with a later runner's weights (the engine makes its
        // draft's runner before it lets the host's copy go), never read.
        const ModelWeights* source = nullptr;
        int device = 0;
        std::vector<std::unique_ptr<kernels::cuda::DeviceWeights>> matrices;
        std::vector<kernels::cuda::DeviceArray<float>> vectors;  // norms and biases
        std::vector<Layer> layers;
        kernels::WeightMatrix embedding, lm_head;
        const float* final_norm = nullptr;
        size_t bytes = 0;
    };
    std::shared_ptr<const DeviceModel> upload_weights(const ModelWeights& weights) const;
    void allocate_cache();
    // Queues the pass over the first n tokens on the stream: what a graph captures.
    void enqueue(int n, int logit_rows, int layers);
    // Copies back each row's argmax, and the logits of the rows the batch did not mark largest_only.
    void copy_back(const Batch& batch);
    kernels::PagedKv layer_kv(int layer) const;

    const ModelConfig& config_;
    RunnerOptions options_;
    std::unique_ptr<kernels::cuda::Context> context_;  // first made, last destroyed
    std::string device_name_;
    int max_blocks_ = 0;  // block table row: blocks of one full context

    std::shared_ptr<const DeviceModel> model_;
    bool owns_model_ = true;

    kernels::cuda::DeviceArray<float> rope_cos_, rope_sin_;  // [max_context][head_dim / 2]
    kernels::cuda::DeviceArray<float> x_, xb_, xb2_, q_, k_, v_, att_, hb_, hb2_, final_, logits_;
    // The batch's integers, one copy up a step: tokens, positions and sequence ([max_batch_tokens]
    // each), logit rows ([max_logit_rows]), block tables ([max_batch_tokens][max_blocks_]).
    kernels::cuda::DeviceArray<int32_t> indices_;
    kernels::cuda::PinnedArray<int32_t> indices_host_;
    kernels::cuda::DeviceArray<int32_t> argmax_;     // [max_logit_rows]
    kernels::cuda::PinnedArray<int32_t> argmax_host_;
    kernels::cuda::PinnedArray<float> logits_host_;  // [max_logit_rows][vocab]
    std::vector<int> table_blocks_;                  // per sequence of a batch: its blocks in use
    size_t working_bytes_ = 0;                       // everything but the weights and the cache

    kernels::cuda::DeviceArray<uint8_t> keys_, values_;  // [layers][blocks][block_size][kv_heads][head_dim]
    size_t layer_kv_bytes_ = 0, kv_bytes_ = 0;

    // (tokens, logit rows, layers) -> the graph of that pass
    std::map<std::tuple<int, int, int>, std::unique_ptr<kernels::cuda::Graph>> graphs_;
};

}  // namespace anvil::engine
