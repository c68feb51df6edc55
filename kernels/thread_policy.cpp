#include "kernels/thread_policy.hpp"

#include <unistd.h>

#include <cstdlib>

namespace anvil::kernels {

void prefer_passive_openmp_waiting(char** argv) {
    if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
    ::setenv("OMP_WAIT_POLICY", "passive", 1);
    ::execv("/proc/self/exe", argv);
    // execv failed (no /proc): run on with the runtime's default policy.
}

}  // namespace anvil::kernels
