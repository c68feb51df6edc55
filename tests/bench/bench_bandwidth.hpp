// The machine's read bandwidth, the ceiling of a memory-bound decode, measured in the same run as
// the figures compared with it. Needs OpenMP (the engine benchmarks link it).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

namespace anvil::bench {

// Best of five passes summing 1 GiB with every OpenMP thread: bytes read per second.
inline double read_bandwidth() {
    using Clock = std::chrono::steady_clock;
    const size_t words = (size_t(1) << 30) / sizeof(uint64_t);
    std::vector<uint64_t> buffer(words);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < words; ++i) buffer[i] = i;
    double best = 0;
    volatile uint64_t sink = 0;
    for (int pass = 0; pass < 5; ++pass) {
        const auto start = Clock::now();
        uint64_t sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : sum)
        for (size_t i = 0; i < words; ++i) sum += buffer[i];
        sink = sink + sum;
        best = std::max(best, double(words * sizeof(uint64_t)) / std::chrono::duration<double>(Clock::now() - start).count());
    }
    return best;
}

}  // namespace anvil::bench
