#include "engine/runner.hpp"

#include <stdexcept>
#include <string>

#include "engine/model_runner.hpp"
#ifdef ANVIL_HAVE_CUDA_KERNELS
#include "engine/cuda_model_runner.hpp"
#include "kernels/cuda/device.hpp"
#endif

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
}

void check_device_name(const std::string& device) {
    if (device == "cpu") return;
#ifdef ANVIL_HAVE_CUDA_KERNELS
    try {
        kernels::cuda::parse_device(device);
    } catch (const std::invalid_argument&) {
        throw std::invalid_argument("device \"" + device + "\": expected cpu, cuda or cuda:N with N a device index");
    }
#else
    if (device == "cuda" || device.starts_with("cuda:"))
        throw std::invalid_argument("device \"" + device +
                                    "\": this anvil-engine was built without the CUDA toolkit (CMake found no nvcc); "
                                    "rebuild where the toolkit is installed, or use --device cpu");
    throw std::invalid_argument("device \"" + device + "\": expected cpu, cuda or cuda:N with N a device index");
#endif
}

void require_device(const std::string& device) {
    check_device_name(device);
    if (device == "cpu") return;
#ifdef ANVIL_HAVE_CUDA_KERNELS
    const int index = kernels::cuda::parse_device(device);
    const kernels::cuda::DeviceProbe probe = kernels::cuda::probe_devices();
    if (probe.count == 0) throw std::runtime_error(device + ": " + probe.reason);
    if (index >= probe.count)
        throw std::runtime_error(device + ": there are " + std::to_string(probe.count) + " CUDA devices (cuda:0 to cuda:" +
                                 std::to_string(probe.count - 1) + ")");
#endif
}

WeightHome weight_home(const std::string& device) { return device == "cpu" ? WeightHome::Cpu : WeightHome::Device; }

std::unique_ptr<Runner> make_runner(const std::string& device, const ModelConfig& config, const ModelWeights& weights,
                                    const RunnerOptions& options) {
    check_device_name(device);
    if (device == "cpu") return std::make_unique<ModelRunner>(config, weights, options);
#ifdef ANVIL_HAVE_CUDA_KERNELS
    return std::make_unique<CudaModelRunner>(kernels::cuda::parse_device(device), config, weights, options);
#else
    throw std::logic_error("unreachable: check_device_name refuses cuda without CUDA kernels");
#endif
}

}  // namespace anvil::engine
