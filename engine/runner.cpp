#include "engine/runner.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include <spdlog/fmt/fmt.h>

#include "engine/cuda_plugin.hpp"
#include "engine/model_runner.hpp"
#include "engine/sampler.hpp"
#include "kernels/device_name.hpp"

namespace anvil::engine {

void check_batch(const Batch& batch, const ModelConfig& config, const RunnerOptions& options) {
    const int n = batch.size();
    if (n == 0 || n > options.max_batch_tokens)
        throw std::logic_error("batch of " + std::to_string(n) + " tokens; the runner takes 1 to " +
                               std::to_string(options.max_batch_tokens));
    if (int(batch.logit_tokens.size()) > options.max_logit_rows)
        throw std::logic_error("batch asks for more logits than the runner holds");
    if (batch.positions.size() != size_t(n) || batch.sequence.size() != size_t(n))
        throw std::logic_error("batch vectors disagree in length");
    for (int i = 0; i < n; ++i) {
        if (batch.tokens[i] < 0 || batch.tokens[i] >= config.vocab_size)
            throw std::logic_error("token id " + std::to_string(batch.tokens[i]) + " outside the vocabulary");
        if (batch.positions[i] < 0 || batch.positions[i] >= options.max_context)
            throw std::logic_error("position outside the context");
        if (batch.sequence[i] < 0 || size_t(batch.sequence[i]) >= batch.block_tables.size())
            throw std::logic_error("token of an unknown sequence");
    }
    for (int t : batch.logit_tokens)
        if (t < 0 || t >= n) throw std::logic_error("logits asked for a token outside the batch");
    if (!batch.largest_only.empty() && batch.largest_only.size() != batch.logit_tokens.size())
        throw std::logic_error("batch marks largest_only for a different number of rows than it asks logits for");
}

namespace {

// The GPU runner's plugin (cuda_plugin.hpp), loaded once, on first use: ANVIL_ENGINE_CUDA_PLUGIN if
// set, else beside the running executable, else where this build wrote it, else where it installs.
struct CudaPlugin {
    CudaMakeRunner make = nullptr;
    CudaCountDevices count = nullptr;
    std::string problem;  // why there is none
};

std::filesystem::path executable_directory() {
    std::error_code error;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
    return error ? std::filesystem::path() : self.parent_path();
}

const CudaPlugin& cuda_plugin() {
    static const CudaPlugin plugin = [] {
        CudaPlugin p;
        std::vector<std::filesystem::path> candidates;
        if (const char* chosen = std::getenv("ANVIL_ENGINE_CUDA_PLUGIN"); chosen && *chosen) candidates.emplace_back(chosen);
        else {
            if (const auto here = executable_directory(); !here.empty()) candidates.push_back(here / kCudaPluginFile);
#ifdef ANVIL_ENGINE_CUDA_PLUGIN_BUILT
            candidates.emplace_back(ANVIL_ENGINE_CUDA_PLUGIN_BUILT);
#endif
#ifdef ANVIL_ENGINE_CUDA_PLUGIN_INSTALLED
            candidates.emplace_back(ANVIL_ENGINE_CUDA_PLUGIN_INSTALLED);
#endif
        }
        std::string tried;
        for (const auto& path : candidates) {
            tried += (tried.empty() ? "" : ", ") + path.string();
            if (!std::filesystem::exists(path)) continue;
            void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (!handle) {
                p.problem = fmt::format("cannot load {}: {}", path.string(), ::dlerror());
                return p;
            }
            p.make = reinterpret_cast<CudaMakeRunner>(::dlsym(handle, kCudaMakeRunnerSymbol));
            p.count = reinterpret_cast<CudaCountDevices>(::dlsym(handle, kCudaCountDevicesSymbol));
            if (!p.make || !p.count)
                p.problem = fmt::format("{} is not this anvil-engine's CUDA runner (no {})", path.string(), kCudaMakeRunnerSymbol);
            return p;  // the handle stays open: runners live in it until exit
        }
        p.problem = fmt::format("this anvil-engine has no CUDA runner ({}, built where CMake finds the CUDA toolkit; looked in {}); "
                                "use --device cpu",
                                kCudaPluginFile, tried.empty() ? std::string("nowhere") : tried);
        return p;
    }();
    return plugin;
}

}  // namespace

void check_device_name(const std::string& device) {
    if (device == "cpu") return;
    try {
        kernels::parse_cuda_device(device);
    } catch (const std::invalid_argument&) {
        throw std::invalid_argument("device \"" + device + "\": expected cpu, cuda or cuda:N with N a device index");
    }
}

int cuda_devices(std::string& reason) {
    const CudaPlugin& plugin = cuda_plugin();
    if (!plugin.count) {
        reason = "no CUDA device: " + plugin.problem;
        return 0;
    }
    return plugin.count(reason);
}

void require_device(const std::string& device) {
    check_device_name(device);
    if (device == "cpu") return;
    const int index = kernels::parse_cuda_device(device);
    std::string reason;
    const int count = cuda_devices(reason);
    if (count == 0) throw std::runtime_error(device + ": " + reason);
    if (index >= count) throw std::runtime_error(kernels::no_such_cuda_device(index, count));
}

WeightHome weight_home(const std::string& device) { return device == "cpu" ? WeightHome::Cpu : WeightHome::Device; }

int32_t Runner::argmax(int i) const { return argmax_token(logits(i), config().vocab_size); }

std::unique_ptr<Runner> make_runner(const std::string& device, const ModelConfig& config, const ModelWeights& weights,
                                    const RunnerOptions& options, const Runner* weights_of) {
    check_device_name(device);
    // The CPU runner reads the weights where they are: sharing them is the caller's one ModelWeights.
    if (device == "cpu") return std::make_unique<ModelRunner>(config, weights, options);
    const CudaPlugin& plugin = cuda_plugin();
    if (!plugin.make) throw std::runtime_error(device + ": " + plugin.problem);
    return std::unique_ptr<Runner>(plugin.make(kernels::parse_cuda_device(device), config, weights, options, weights_of));
}

size_t device_weight_bytes(const ModelConfig& c, const ModelWeights& weights) {
    size_t bytes = matrix_bytes(weights.embedding);
    if (weights.lm_head.data != weights.embedding.data) bytes += matrix_bytes(weights.lm_head);
    size_t vectors = weights.final_norm ? size_t(c.dim) : 0;
    for (const LayerWeights& w : weights.layers) {
        for (const auto* m : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down}) bytes += matrix_bytes(*m);
        vectors += (w.attn_norm ? c.dim : 0) + (w.ffn_norm ? c.dim : 0) + (w.bq ? c.q_dim() : 0) + (w.bk ? c.kv_dim() : 0) +
                   (w.bv ? c.kv_dim() : 0) + (w.q_norm ? c.head_dim : 0) + (w.k_norm ? c.head_dim : 0);
    }
    return bytes + vectors * sizeof(float);
}

size_t device_working_bytes(const ModelConfig& c, const RunnerOptions& o) {
    const size_t n = size_t(o.max_batch_tokens), rows = size_t(o.max_logit_rows);
    const size_t rope = 2 * size_t(o.max_context) * size_t(c.head_dim / 2);
    const size_t activations = n * (3 * size_t(c.dim) + 2 * size_t(c.q_dim()) + 2 * size_t(c.kv_dim()) + 2 * size_t(c.hidden_dim));
    const size_t logits = rows * (size_t(c.dim) + size_t(c.vocab_size));
    const size_t max_blocks = size_t((o.max_context + o.block_size - 1) / o.block_size);
    const size_t indices = 3 * n + rows + n * max_blocks + rows;  // the last: each row's argmax
    const size_t scratch = std::max(n, rows) * size_t(std::max({c.dim, c.q_dim(), c.hidden_dim})) * sizeof(uint16_t);
    return (rope + activations + logits) * sizeof(float) + indices * sizeof(int32_t) + scratch + kDeviceHeadroomBytes;
}

size_t device_block_bytes(const ModelConfig& c, const RunnerOptions& o) {
    const size_t element = o.kv_type == kernels::KvType::BF16 ? 2 : 4;
    return 2 * size_t(c.n_layers) * size_t(o.block_size) * size_t(c.kv_dim()) * element;
}

}  // namespace anvil::engine
