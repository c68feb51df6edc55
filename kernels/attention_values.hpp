// Walking a kv head's positions in the paged KV cache, and the AVX-512 pass that weighs its values:
// shared by kernels/attention.cpp (AVX2) and kernels/attention_avx512.cpp, which is compiled for
// AVX-512 on its own. Internal to kernels/.
#pragma once
// The helpers below have internal linkage: this header is compiled with AVX2 flags in one file and
// AVX-512 flags in another, and the linker must not keep one copy for both.

#include <algorithm>
#include <cstddef>
#include <cstdint>

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

// out[h * d + i] = sum over positions j of scores[h * count + j] * v_j[i], for the N (1 to 4) heads
// that share this kv head, with every column i below the returned one (a multiple of 16; the
// caller sums the rest). Each column's sum runs over the positions in order with fused
// multiply-adds, as the AVX2 pass does, so the two give the same floats. Element: float or bf16 bits.
int weigh_values_avx512(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int first, const float* values,
                        int count, int heads, const float* scores, float* out);
int weigh_values_avx512(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int first, const uint16_t* values,
                        int count, int heads, const float* scores, float* out);

}  // namespace anvil::kernels
