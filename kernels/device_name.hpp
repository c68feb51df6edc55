// Naming a CUDA device ("cuda", "cuda:N") without the CUDA toolkit: the engine's --device flag is
// read the same way in builds with and without it.
#pragma once

#include <string>
#include <string_view>

namespace anvil::kernels {

// "cuda" is device 0; "cuda:N" is device N. Anything else throws std::invalid_argument saying what
// the accepted forms are.
int parse_cuda_device(std::string_view text);

// Why device `index` cannot be used on a machine with `count` CUDA devices (count > 0): said the
// same way by the engine, which asks the plugin first, and the kernels' context.
std::string no_such_cuda_device(int index, int count);

}  // namespace anvil::kernels
