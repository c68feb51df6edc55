// The GPU runner is a plugin, libanvil-engine-cuda.so, loaded only when a CUDA device is asked
// for: anvil-engine itself links no CUDA library, so one build runs on machines with and without
// the CUDA runtime (as llama.cpp's backends are loaded). The plugin resolves the engine's own
// symbols from the executable that loads it (which exports them: ENABLE_EXPORTS).
#pragma once

#include <string>

#include "engine/runner.hpp"

namespace anvil::engine {

inline constexpr const char* kCudaPluginFile = "libanvil-engine-cuda.so";

// The plugin's entry points, looked up by these names. Both throw std::exception saying why.
// A new runner, owned by the caller; `weights_of` as make_runner's (runner.hpp), or null.
using CudaMakeRunner = Runner* (*)(int device, const ModelConfig& config, const ModelWeights& weights,
                                   const RunnerOptions& options, const Runner* weights_of);
inline constexpr const char* kCudaMakeRunnerSymbol = "anvil_engine_cuda_make_runner_v2";
// How many CUDA devices there are; 0, with `reason` set, when none can be used.
using CudaCountDevices = int (*)(std::string& reason);
inline constexpr const char* kCudaCountDevicesSymbol = "anvil_engine_cuda_count_devices_v1";

}  // namespace anvil::engine
