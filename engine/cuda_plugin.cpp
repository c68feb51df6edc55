// libanvil-engine-cuda.so's entry points (cuda_plugin.hpp).
#include "engine/cuda_plugin.hpp"

#include "engine/cuda_model_runner.hpp"
#include "kernels/cuda/device.hpp"

extern "C" {

anvil::engine::Runner* anvil_engine_cuda_make_runner_v2(int device, const anvil::engine::ModelConfig& config,
                                                        const anvil::engine::ModelWeights& weights,
                                                        const anvil::engine::RunnerOptions& options,
                                                        const anvil::engine::Runner* weights_of) {
    return new anvil::engine::CudaModelRunner(device, config, weights, options, weights_of);
}

int anvil_engine_cuda_count_devices_v1(std::string& reason) {
    const anvil::kernels::cuda::DeviceProbe probe = anvil::kernels::cuda::probe_devices();
    reason = probe.reason;
    return probe.count;
}

}  // extern "C"

// The types the engine names must be the plugin's: a mismatch would be a build of two versions.
static_assert(std::is_same_v<decltype(&anvil_engine_cuda_make_runner_v2), anvil::engine::CudaMakeRunner>);
static_assert(std::is_same_v<decltype(&anvil_engine_cuda_count_devices_v1), anvil::engine::CudaCountDevices>);
