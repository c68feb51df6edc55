// The part of the vector products that does not depend on the instruction set: where a row
// starts, how a row tile walks the tokens, and how the tiles of up to kMaxMatmulGroup matrices are
// shared out among the OpenMP threads. matmul_avx2.cpp, matmul_avx512.cpp and
// matmul_avx512bf16.cpp each supply their `Tile<T, RT, TT>::run` and instantiate `run_tiles` with it.
//
// Everything here has internal linkage on purpose: each including file is compiled with its own
// instruction-set flags, and one shared (inline, external) copy chosen by the linker could carry
// AVX-512 instructions into the AVX2 path.
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "kernels/matmul.hpp"

namespace anvil::kernels::detail {
namespace {

constexpr int kTokenChunk = 64;            // tokens whose activations stay in L2 while the rows stream by
constexpr double kParallelWork = 1 << 17;  // multiply-adds below which one thread does it all

// How far ahead of its reads a decode tile asks for weight bytes: near into L1 and far into L2. On
// the Intel VM (480 MB L3) the hardware prefetchers alone kept too few lines in flight
// (docs/PERFORMANCE.md, session 20). The GGUF block kernels ask nearer into L1 at 2 KB
// (matmul_blocks_common.hpp), measured apart.
constexpr int kPrefetchNear = 1024;
constexpr int kPrefetchFar = 8192;

inline const void* row_pointer(const WeightMatrix& w, int r) {
    const size_t offset = size_t(r) * w.cols;
    switch (w.type) {
        case WeightType::F32: return static_cast<const float*>(w.data) + offset;
        case WeightType::BF16:
        case WeightType::F16: return static_cast<const uint16_t*>(w.data) + offset;
        case WeightType::Q8: return static_cast<const int8_t*>(w.data) + offset;
        case WeightType::Q8Packed: break;  // not row-major: only matmul_avx512vnni.cpp reads it
        case WeightType::Q8Packed8: break;  // nor this: matmul_avx2_packed.cpp
        case WeightType::Q4_0:
        case WeightType::Q4_K:
        case WeightType::Q6_K:
        case WeightType::Q4_KPacked8:
        case WeightType::Q6_KPacked8:
        case WeightType::Q4_0Packed8: break;  // GGUF blocks: matmul_avx2_blocks.cpp
    }
    return nullptr;
}

// Shares items 0 .. items-1 of a product with one chunk of tokens (decode, small batches) among the
// team: thread t takes the t-th contiguous share, claiming `chunk` items at a time from that
// share's counter, then claims what is left of the other shares. So each thread reads its rows in
// one long stream the prefetchers follow, and a thread the OS preempts holds nobody up for long:
// the others finish its share. OpenMP's dynamic schedule handed out alternating chunks instead;
// guided (large chunks first) already beat it. Decode's products on the bench model, 2 threads,
// runs of the two builds interleaved: Q4_K_M 3.35 -> 3.00 ms a token, Q4_0 2.99 -> 2.44, q8 6.96 ->
// 5.84; beside a busy process, as fast as before (docs/PERFORMANCE.md).
struct alignas(64) Share {
    std::atomic<int> next{0};
    int end = 0;
};
constexpr int kMaxShares = 64;

// Splits items into `count` contiguous shares (at most kMaxShares).
inline int start_shares(Share* shares, int count, int items) {
    count = std::max(1, std::min(count, kMaxShares));
    for (int t = 0; t < count; ++t) {
        shares[t].next.store(int(int64_t(items) * t / count), std::memory_order_relaxed);
        shares[t].end = int(int64_t(items) * (t + 1) / count);
    }
    return count;
}

// Every thread of the team calls this inside the parallel region, with the shares start_shares set
// before it; a team smaller than `count` still covers every share.
template <typename Body>
void work_shares(Share* shares, int count, int chunk, Body body) {
    const int own = omp_get_thread_num() % count;
    for (int k = 0; k < count; ++k) {
        Share& share = shares[(own + k) % count];
        for (;;) {
            const int first = share.next.fetch_add(chunk, std::memory_order_relaxed);
            if (first >= share.end) break;
            const int last = std::min(share.end, first + chunk);
            for (int item = first; item < last; ++item) body(item);
        }
    }
}

// A product of one chunk of tokens: its items in contiguous shares, on every thread when `parallel`.
template <typename Body>
void run_shared(bool parallel, int items, int chunk, Body body) {
    Share shares[kMaxShares];
    const int count = start_shares(shares, parallel ? omp_get_max_threads() : 1, items);
    // A team of one still costs libgomp's region entry and exit: one thread works its single share
    // directly. A Q4_0 product of 256 rows held in L2, one thread, Zen 5: 4.2-4.5 -> 2.7-3.0 us.
    if (count == 1) return work_shares(shares, 1, chunk, body);
#pragma omp parallel
    work_shares(shares, count, chunk, body);
}

// Row tile `rt` of w for tokens c0..c1: whole RT x TT tiles, then the leftover tokens and rows
// one at a time. `Input` is what the tiles read the activations as (f32, or bf16 bits).
template <template <WeightType, int, int> class Tile, WeightType T, int RT, int TT, typename Input>
void row_tile(const WeightMatrix& w, int rt, const Input* x, const QuantizedInput* qx, int c0, int c1, float* y) {
    const int r0 = rt * RT;
    if (r0 + RT <= w.rows) {
        int t = c0;
        for (; t + TT <= c1; t += TT) Tile<T, RT, TT>::run(w, r0, x, qx, t, y);
        for (; t < c1; ++t) Tile<T, RT, 1>::run(w, r0, x, qx, t, y);
    } else {
        for (int r = r0; r < w.rows; ++r) {
            int t = c0;
            for (; t + TT <= c1; t += TT) Tile<T, 1, TT>::run(w, r, x, qx, t, y);
            for (; t < c1; ++t) Tile<T, 1, 1>::run(w, r, x, qx, t, y);
        }
    }
}

// Several matrices of one format and width applied to the same input share one parallel region:
// on a busy machine every region's end waits for its slowest thread.
template <template <WeightType, int, int> class Tile, WeightType T, int RT, int TT, typename Input>
void run_tiles(const WeightMatrix* ws, float* const* ys, int count, const Input* x, const QuantizedInput* qx,
               int n_tokens) {
    int first_tile[kMaxMatmulGroup + 1] = {0};
    double work = 0;
    for (int m = 0; m < count; ++m) {
        first_tile[m + 1] = first_tile[m] + (ws[m].rows + RT - 1) / RT;
        work += double(ws[m].rows) * ws[m].cols * n_tokens;
    }
    const int tiles = first_tile[count];
    auto tile = [&](int item, int c0, int c1) {
        int m = 0;
        while (item >= first_tile[m + 1]) ++m;
        row_tile<Tile, T, RT, TT>(ws[m], item - first_tile[m], x, qx, c0, c1, ys[m]);
    };
    // Small products are not worth waking the other threads for.
    const bool parallel = work >= kParallelWork;
    if (n_tokens <= kTokenChunk) return run_shared(parallel, tiles, 8, [&](int item) { tile(item, 0, n_tokens); });
#pragma omp parallel if (parallel)
    for (int c0 = 0; c0 < n_tokens; c0 += kTokenChunk) {
        const int c1 = std::min(n_tokens, c0 + kTokenChunk);
        // Dynamic: a thread the OS preempts does not hold the others up. Chunks are independent,
        // so no barrier between them.
#pragma omp for schedule(dynamic, 8) nowait
        for (int item = 0; item < tiles; ++item) tile(item, c0, c1);
    }
}

// The same sharing for a packed layout's items (a few row blocks each): `items_of(w)` counts a
// matrix's items, `run_item(w, item, c0, c1, y)` computes one for tokens c0..c1.
template <typename ItemsOf, typename RunItem>
void run_items(const WeightMatrix* ws, float* const* ys, int count, int n_tokens, ItemsOf items_of, RunItem run_item) {
    int first_item[kMaxMatmulGroup + 1] = {0};
    double work = 0;
    for (int m = 0; m < count; ++m) {
        first_item[m + 1] = first_item[m] + items_of(ws[m]);
        work += double(ws[m].rows) * ws[m].cols * n_tokens;
    }
    const int items = first_item[count];
    auto one = [&](int item, int c0, int c1) {
        int m = 0;
        while (item >= first_item[m + 1]) ++m;
        run_item(ws[m], item - first_item[m], c0, c1, ys[m]);
    };
    const bool parallel = work >= kParallelWork;
    if (n_tokens <= kTokenChunk) return run_shared(parallel, items, 2, [&](int item) { one(item, 0, n_tokens); });
#pragma omp parallel if (parallel)
    for (int c0 = 0; c0 < n_tokens; c0 += kTokenChunk) {
        const int c1 = std::min(n_tokens, c0 + kTokenChunk);
#pragma omp for schedule(dynamic, 4) nowait
        for (int item = 0; item < items; ++item) one(item, c0, c1);
    }
}

}  // namespace
}  // namespace anvil::kernels::detail
