#include "kernels/thread_policy.hpp"

#include <unistd.h>

#include <cstdlib>

namespace anvil::kernels {

void prefer_passive_openmp_waiting(char** argv) {
    if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
    ::setenv("OMP_WAIT_POLICY", "passive", 1);
    // But spin a few microseconds first (libgomp counts about 100 spins a microsecond): the other
    // thread is usually that close behind, and a futex sleep and wake-up at each of a token's ~50
    // region boundaries cost idle-machine q8 decode 0.86-0.89 -> 0.76-0.78 of the bandwidth
    // ceiling. Beside a busy process it costs ~20% instead (docs/PERFORMANCE.md). An explicit
    // GOMP_SPINCOUNT, 0 included, is kept.
    ::setenv("GOMP_SPINCOUNT", "300", 0);
    ::execv("/proc/self/exe", argv);
    // execv failed (no /proc): run on with the runtime's default policy.
}

}  // namespace anvil::kernels
