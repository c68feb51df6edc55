#include "kernels/thread_policy.hpp"

#include <unistd.h>

#include <cstdlib>

namespace anvil::kernels {

void prefer_passive_openmp_waiting(char** argv) {
    if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
    ::setenv("OMP_WAIT_POLICY", "passive", 1);
    // But spin about 10 microseconds first (libgomp's spin is a pause instruction, about 10 ns on
    // both development VMs): the other thread is usually that close behind (the end of its last
    // share, the serial steps between products), and a futex sleep and wake-up at each of a
    // token's ~50 region boundaries is dear on a VM. Idle-machine decode of the bench model, 2
    // threads, Intel VM: spin 300 -> 1000 took q8 209 -> 236 tok/s and Q4_K_M 400 -> 465; beside
    // a busy process it costs ~10% instead (docs/PERFORMANCE.md). An explicit GOMP_SPINCOUNT, 0
    // included, is kept.
    ::setenv("GOMP_SPINCOUNT", "1000", 0);
    ::execv("/proc/self/exe", argv);
    // execv failed (no /proc): run on with the runtime's default policy.
}

}  // namespace anvil::kernels
