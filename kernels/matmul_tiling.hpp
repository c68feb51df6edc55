// The part of the vector products that does not depend on the instruction set: where a row
// starts, how a row tile walks the tokens, and how the tiles of up to kMaxMatmulGroup matrices are
// shared out among the threads (kernels/team.hpp). matmul_avx2.cpp, matmul_avx512.cpp and
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
#include "kernels/team.hpp"

namespace anvil::kernels::detail {
namespace {

constexpr int kTokenChunk = 64;            // tokens whose activations stay in L2 while the rows stream by
constexpr double kParallelWork = 1 << 17;  // multiply-adds below which one thread does it all

// How far ahead of its reads a decode tile asks for weight bytes: near into L1 and far into L2. On
// the Intel VM (480 MB L3) the hardware prefetchers alone kept too few lines in flight
// (docs/PERFORMANCE.md, "Prefetch distances"). The GGUF block kernels ask nearer into L1 at 2 KB
// (matmul_blocks_common.hpp), measured apart.
constexpr int kPrefetchNear = 1024;
constexpr int kPrefetchFar = 8192;
// The largest decode tile whose successor a tile asks for into L1 as it goes (AVX2 bf16): with
// both in a 32-48 KB L1 (docs/PERFORMANCE.md, "Prefetch distances").
constexpr size_t kNextTileBytes = 16384;
// The longest row for which the 16-bit float tiles ask for the next tile's line into L2: the
// hardware prefetcher does not get ahead of shorter rows, and keeps up with longer ones, where the
// requests only compete with it (f16 at 4096-14336 columns 8-29% faster without them).
constexpr size_t kShortRowBytes = 2048;

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
        case WeightType::Q4_0Packed8:
        case WeightType::Q6_KPacked8Avx2: break;  // GGUF blocks: matmul_avx2_blocks.cpp
    }
    return nullptr;
}

// A product of one chunk of tokens (decode, small batches), or any product inside a forward pass's
// team: each chunk's items shared in turn (share_items), `one(item, c0, c1)` computing an item.
template <typename One>
void share_chunks(bool parallel, int items, int chunk, int n_tokens, One& one) {
    for (int c0 = 0; c0 < n_tokens; c0 += kTokenChunk) {
        const int c1 = std::min(n_tokens, c0 + kTokenChunk);
        share_items(parallel, items, chunk, [&](int item) { one(item, c0, c1); });
    }
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
    if (n_tokens <= kTokenChunk || current_team()) return share_chunks(parallel, tiles, 8, n_tokens, tile);
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
    if (n_tokens <= kTokenChunk || current_team()) return share_chunks(parallel, items, 2, n_tokens, one);
#pragma omp parallel if (parallel)
    for (int c0 = 0; c0 < n_tokens; c0 += kTokenChunk) {
        const int c1 = std::min(n_tokens, c0 + kTokenChunk);
#pragma omp for schedule(dynamic, 4) nowait
        for (int item = 0; item < items; ++item) one(item, c0, c1);
    }
}

}  // namespace
}  // namespace anvil::kernels::detail
