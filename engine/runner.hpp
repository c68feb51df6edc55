// What runs the model: the forward pass over a batch of tokens from any mix of sequences (prefill
// chunks and decode steps alike) and the logits of the tokens asked for. The scheduler, block
// manager, sampler and server are shared by every device; only a Runner knows where the weights,
// activations and KV cache live (model_runner.hpp: the CPU; cuda_model_runner.hpp: one GPU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/config.hpp"
#include "engine/weights.hpp"
#include "kernels/attention.hpp"

namespace anvil::engine {

// One step's tokens. Vectors are reused between steps: clear() keeps their capacity.
struct Batch {
    std::vector<int32_t> tokens;     // [n]
    std::vector<int32_t> positions;  // [n] position of each token in its sequence
    std::vector<int32_t> sequence;   // [n] index into block_tables
    std::vector<const int32_t*> block_tables;  // per sequence: its blocks, in position order
    std::vector<int32_t> logit_tokens;  // indices into tokens whose logits are wanted, in order
    // Per logits row, or empty for none: 1 where only the row's argmax is read (a greedy sequence
    // with no logprobs, bias or grammar), so that a GPU need not copy the row back.
    std::vector<uint8_t> largest_only;

    // Capacity for `tokens` tokens of up to `sequences` sequences and `logit_rows` logits rows, so
    // that filling it during decoding never allocates.
    void reserve(int max_tokens, int sequences, int logit_rows) {
        tokens.reserve(size_t(max_tokens));
        positions.reserve(size_t(max_tokens));
        sequence.reserve(size_t(max_tokens));
        block_tables.reserve(size_t(sequences));
        logit_tokens.reserve(size_t(logit_rows));
        largest_only.reserve(size_t(logit_rows));
    }
    void clear() {
        tokens.clear();
        positions.clear();
        sequence.clear();
        block_tables.clear();
        logit_tokens.clear();
        largest_only.clear();
    }
    int size() const { return int(tokens.size()); }
};

struct RunnerOptions {
    int max_batch_tokens = 256;  // tokens one forward() may carry
    int max_logit_rows = 16;     // logits one forward() may return
    int max_context = 2048;      // positions per sequence
    int kv_blocks = 0;           // blocks in the cache; 0 on a GPU: as many as memory_fraction leaves room for
    int block_size = 16;
    kernels::KvType kv_type = kernels::KvType::F32;
    int threads = 0;             // CPU: OpenMP threads; 0: omp_get_max_threads() of the constructing thread
    // GPU: the share of the device's memory the runner may hold (weights, activations, KV cache), as
    // vLLM's --gpu-memory-utilization; what other processes hold counts against it too.
    double memory_fraction = 0.9;
    // GPU: what a second runner on the same device will hold beside this one (a draft's weights
    // and working memory, and its cache's bytes per block of this one's, since one block table
    // serves both): left out of this runner's share, so that the pair stays within the fraction.
    size_t companion_bytes = 0;
    size_t companion_block_bytes = 0;
};

class Runner {
public:
    virtual ~Runner() = default;

    // Writes the batch's keys and values into the cache slots its block tables name, and fills
    // logits(i) for the i-th entry of batch.logit_tokens. `exit_after` > 0 stops after that many
    // layers (an early exit: the draft of --draft-layers): only those layers' keys and values are
    // written, and the logits come from the final norm and LM head applied there.
    virtual void forward(const Batch& batch, int exit_after = 0) = 0;
    // Host memory, valid until the next forward(); not for rows the batch marked largest_only.
    virtual const float* logits(int i) const = 0;
    // The first largest logit of row i: what greedy sampling picks. A GPU finds it on the device
    // and copies back only that for rows marked largest_only.
    virtual int32_t argmax(int i) const;

    virtual const ModelConfig& config() const = 0;
    // As constructed, but for kv_blocks, which is what the cache holds.
    virtual const RunnerOptions& options() const = 0;
    virtual size_t kv_bytes() const = 0;
    // GPU memory this runner holds: the weights it uploaded, its working memory as
    // device_working_bytes counts it (the headroom for graphs and cuBLAS included), its KV cache;
    // 0 on the CPU.
    virtual size_t device_bytes() const { return 0; }
    virtual std::string device() const = 0;  // "cpu", or "cuda:N (name)"
};


// Throws std::logic_error naming what is wrong when the batch does not fit the runner (the engine
// builds batches; a bad one is a bug, not a request to refuse).
void check_batch(const Batch& batch, const ModelConfig& config, const RunnerOptions& options);

// Where a runner for `device` keeps the weights: the CPU's kernel levels pack some formats for
// themselves; a GPU takes them row-major.
WeightHome weight_home(const std::string& device);

// "cpu", or "cuda" / "cuda:N" (through the plugin of cuda_plugin.hpp). A CUDA device without the
// plugin (a build without the CUDA toolkit) or on a machine without one throws std::runtime_error
// saying so in one line. `weights_of`: a runner made from these same weights, whose copy on the
// device the new one reads instead of uploading its own (a self draft held as the target is).
std::unique_ptr<Runner> make_runner(const std::string& device, const ModelConfig& config, const ModelWeights& weights,
                                    const RunnerOptions& options, const Runner* weights_of = nullptr);

// What a GPU runner (cuda_model_runner.hpp) allocates for these weights and options, so that a
// draft's share can be left out of the target's before either exists: its copy of the weights
// (matrices as the device multiplies them, norms and biases), and its working memory (activations,
// rope tables, the batch's indices, logits, cuBLAS's scratch and the headroom of its graphs and
// kernels). The KV cache is the options' blocks, or whatever the fraction leaves.
inline constexpr size_t kDeviceHeadroomBytes = size_t(256) << 20;  // CUDA graphs, cuBLAS's kernels, rounding
size_t device_weight_bytes(const ModelConfig& config, const ModelWeights& weights);
size_t device_working_bytes(const ModelConfig& config, const RunnerOptions& options);
// A GPU runner's KV cache per block of options.block_size positions, keys and values of every layer.
size_t device_block_bytes(const ModelConfig& config, const RunnerOptions& options);

// Throws std::invalid_argument unless `device` is "cpu", "cuda" or "cuda:N".
void check_device_name(const std::string& device);
// How many CUDA devices the GPU runner's plugin sees (cuda_plugin.hpp); 0, with `reason`, when
// there is no plugin, no driver or no device.
int cuda_devices(std::string& reason);
// Throws std::runtime_error saying why when `device` is a GPU this machine does not have: checked
// before a model's weights are read, which takes minutes for a large one.
void require_device(const std::string& device);

}  // namespace anvil::engine
