// The machine's read bandwidth for a working set of a given size, the ceiling of a memory-bound
// decode, measured in the same run as the figures compared with it. Needs OpenMP (the engine
// benchmarks link it).
//
// The size matters: decode streams the same weights every token, so its ceiling is the rate at
// which a buffer of that many bytes can be read again and again. Where the weights fit a large
// last-level cache (the Intel VM's 480 MB L3 holds the bench model in every format but f32), that
// is the cache's bandwidth, not DRAM's: a 1 GiB baseline there put decode at 1.1-1.6 of its
// "ceiling" and measured nothing. The buffer is on huge pages where the kernel offers them, as the
// weights and the KV cache are (kernels/streamed_memory.hpp): the ceiling of the same stream.
#pragma once

#include <emmintrin.h>
#include <omp.h>
#include <xmmintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "kernels/streamed_memory.hpp"

namespace anvil::bench {

// How one thread reads its share. No one loop reads fastest everywhere, so the ceiling is the best
// of two (2026-12-05, Zen 5 VM, 2 threads, 150 MB: the first 62-72 GB/s, the second 95-98):
// - kAhead: one stream with the requests ahead that the kernels make (1 KB and 8 KB: kPrefetchNear
//   and kPrefetchFar, kernels/matmul_tiling.hpp). Without them a plain summing loop read the Intel
//   VM's L3 at about a third of what the decode kernels do, and would be no ceiling at all.
// - kTwoStreams: the share's two halves side by side, plain loads. Zen 5's prefetchers follow two
//   streams further than one, and the software requests above cost it a fifth to a third.
enum class ReadPattern { kAhead, kTwoStreams };

// `count` lines from `line`, summed in four 16-byte lanes.
inline uint64_t read_lines(const __m128i* line, size_t count, ReadPattern pattern) {
    __m128i a = _mm_setzero_si128(), b = a, c = a, d = a;
    if (pattern == ReadPattern::kAhead) {
        for (size_t i = 0; i < count; ++i, line += 4) {
            _mm_prefetch(reinterpret_cast<const char*>(line) + 1024, _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(line) + 8192, _MM_HINT_T1);
            a = _mm_add_epi64(a, _mm_load_si128(line));
            b = _mm_add_epi64(b, _mm_load_si128(line + 1));
            c = _mm_add_epi64(c, _mm_load_si128(line + 2));
            d = _mm_add_epi64(d, _mm_load_si128(line + 3));
        }
    } else {
        const size_t half = count / 2;
        const __m128i* other = line + 4 * half;
        for (size_t i = 0; i < half; ++i, line += 4, other += 4) {
            a = _mm_add_epi64(a, _mm_load_si128(line));
            b = _mm_add_epi64(b, _mm_load_si128(line + 1));
            c = _mm_add_epi64(c, _mm_load_si128(line + 2));
            d = _mm_add_epi64(d, _mm_load_si128(line + 3));
            a = _mm_add_epi64(a, _mm_load_si128(other));
            b = _mm_add_epi64(b, _mm_load_si128(other + 1));
            c = _mm_add_epi64(c, _mm_load_si128(other + 2));
            d = _mm_add_epi64(d, _mm_load_si128(other + 3));
        }
        if (count % 2) a = _mm_add_epi64(a, _mm_load_si128(other));  // the odd line left over
    }
    const __m128i sum = _mm_add_epi64(_mm_add_epi64(a, b), _mm_add_epi64(c, d));
    return uint64_t(_mm_cvtsi128_si64(sum)) + uint64_t(_mm_cvtsi128_si64(_mm_unpackhi_epi64(sum, sum)));
}

// Bytes read per second by every OpenMP thread reading a buffer of `bytes` (at least 1 MB), each
// thread one contiguous share as a product's rows are shared. Each timing covers as many passes as
// take 0.1 s; the patterns take turns, five timings each, so that both meet the same moments of a
// shared host, and the best timing of either counts.
inline double read_bandwidth(size_t bytes = size_t(1) << 30) {
    using Clock = std::chrono::steady_clock;
    const size_t lines = std::max(bytes, size_t(1) << 20) / 64;
    const kernels::StreamedBuffer buffer = kernels::allocate_streamed(lines * 64);
    auto* words = reinterpret_cast<uint64_t*>(buffer.get());
    const auto* vectors = reinterpret_cast<const __m128i*>(buffer.get());
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < lines * 8; ++i) words[i] = i;
    double best = 0;
    volatile uint64_t sink = 0;
    for (int timing = 0; timing < 10; ++timing) {
        const ReadPattern pattern = timing % 2 ? ReadPattern::kTwoStreams : ReadPattern::kAhead;
        const auto start = Clock::now();
        double seconds = 0;
        size_t passes = 0;
        do {
            uint64_t sum = 0;
#pragma omp parallel reduction(+ : sum)
            {
                const size_t threads = size_t(omp_get_num_threads()), t = size_t(omp_get_thread_num());
                const size_t first = lines * t / threads, last = lines * (t + 1) / threads;
                sum += read_lines(vectors + 4 * first, last - first, pattern);
            }
            sink = sink + sum;
            ++passes;
            seconds = std::chrono::duration<double>(Clock::now() - start).count();
        } while (seconds < 0.1);
        best = std::max(best, double(passes * lines * 64) / seconds);
    }
    return best;
}

}  // namespace anvil::bench
