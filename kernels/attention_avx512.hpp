// Walking a kv head's positions in the paged KV cache, and decode attention's two passes at the
// AVX-512 levels (the keys' scores, the values weighed by them): the walk is shared by
// kernels/attention.cpp (AVX2) and kernels/attention_avx512.cpp, which is compiled for AVX-512 on
// its own. Internal to kernels/.
#pragma once
// The helpers below have internal linkage: this header is compiled with AVX2 flags in one file and
// AVX-512 flags in another, and the linker must not keep one copy for both.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <immintrin.h>

#include "kernels/attention.hpp"

namespace anvil::kernels {

// Elements between consecutive blocks, positions and kv heads of a cache, as its layout has them.
struct KvStrides {
    size_t block, position, head;
};

static inline KvStrides strides_of(const PagedKv& kv) {
    const size_t d = size_t(kv.head_dim), slots = size_t(kv.block_size), heads = size_t(kv.kv_heads);
    if (kv.layout == KvLayout::HeadMajor) return {heads * slots * d, d, slots * d};
    return {slots * heads * d, heads * d, d};
}

// Where position p of a kv head lives, in elements from the head's first (keys + kv_head x head).
static inline size_t position_offset(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int p) {
    return size_t(block_table[p / kv.block_size]) * s.block + size_t(p % kv.block_size) * s.position;
}

// Calls visit(j, offset) for positions first + j, j = 0 .. count-1, with the offset of each in a
// kv head's elements: a block-table lookup per block rather than a division per position.
template <typename Visit>
static inline void walk_positions(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int first, int count, Visit visit) {
    int j = 0;
    while (j < count) {
        const int position = first + j;
        const int run = std::min(kv.block_size - position % kv.block_size, count - j);
        const size_t at = position_offset(kv, s, block_table, position);
        for (int r = 0; r < run; ++r) visit(j + r, at + size_t(r) * s.position);
        j += run;
    }
}

// walk_positions, with visit(j, offset, ahead) also given the offset of position first + j +
// `distance` (kNoPosition past the last) for the requests ahead, counted along with the walk
// rather than by position_offset's division at every position.
inline constexpr size_t kNoPosition = ~size_t(0);
template <typename Visit>
static inline void walk_positions_ahead(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int first, int count,
                                        int distance, Visit visit) {
    int ahead_block = (first + distance) / kv.block_size, ahead_slot = (first + distance) % kv.block_size;
    walk_positions(kv, s, block_table, first, count, [&](int j, size_t at) {
        size_t ahead = kNoPosition;
        if (j + distance < count) {
            ahead = size_t(block_table[ahead_block]) * s.block + size_t(ahead_slot) * s.position;
            if (++ahead_slot == kv.block_size) ahead_slot = 0, ++ahead_block;
        }
        visit(j, at, ahead);
    });
}

// Positions ahead whose lines a pass asks for (into L2) while it works on this one: a kv head is read a few hundred bytes per position, across blocks, and by the time a
// layer's attention runs, the weights streamed since have pushed the KV cache's lines out of every
// cache level. Waiting for those loads was most of attention's time (a layer of the bench model at
// 80 positions, caches cold: 35 us without, 21-29 with four ahead). At 2000 positions, two threads,
// head-major f32 cache read cold: 8 ahead 32 GB/s, 16 ahead 39-40, 32 ahead 37-39 (the EPYC VM).
// At the AVX-512 levels each pass asks for its own rows: the keys' pass used to ask for the
// values' too, so that the values' pass read them from L2, but on Intel a request holds one of the
// core's few line-fill buffers until its line arrives, and twice the requests left the keys' pass
// stalled on them (a third of its samples); asked for by the pass that reads them, the same cache
// read 1.14-1.24x as fast (docs/PERFORMANCE.md, "Attention passes"). The AVX2 keys' pass still
// asks for both (kernels/attention.cpp says why).
inline constexpr int kAttentionPrefetch = 16;

template <typename Element>
static inline void prefetch_head(const Element* p, int d) {
    for (size_t byte = 0; byte < size_t(d) * sizeof(Element); byte += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p) + byte, _MM_HINT_T1);
}

// scores[h * count + j] = scale * q_h . k_j for the N (1 to 4) query heads of this kv head and
// positions j = 0 .. count-1 (head_dim a multiple of 16), with the next positions' keys asked for
// as the AVX2 pass asks. Its dot products sum in another order than the AVX2 pass's, so
// the two levels' scores differ in the last bits (each level's are the same whatever the batch).
void score_keys_avx512(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int first, const float* keys,
                       int count, int heads, const float* q, float scale, float* scores);
void score_keys_avx512(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int first, const uint16_t* keys,
                       int count, int heads, const float* q, float scale, float* scores);

// out[h * d + i] = sum over positions j of scores[h * count + j] * v_j[i], for the N (1 to 4) heads
// that share this kv head, with every column i below the returned one (a multiple of 16; the
// caller sums the rest). Each column's sum runs over the positions in order with fused
// multiply-adds, as the AVX2 pass does, so the two give the same floats. Element: float or bf16 bits.
int weigh_values_avx512(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int first, const float* values,
                        int count, int heads, const float* scores, float* out);
int weigh_values_avx512(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int first, const uint16_t* values,
                        int count, int heads, const float* scores, float* out);

}  // namespace anvil::kernels
