// The values' pass of decode attention at the AVX-512 levels (see attention_values.hpp).
#include <immintrin.h>

#include "kernels/attention_values.hpp"

namespace anvil::kernels {
namespace {

#define ANVIL_UNROLL _Pragma("GCC unroll 16")

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

// Columns i .. i + 16Z of N heads: N x Z sums in registers.
template <int N, int Z, typename Element>
void weigh(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int first, const Element* values, int count,
           int i, const float* scores, float* out) {
    const int d = kv.head_dim;
    __m512 sum[N][Z];
    ANVIL_UNROLL
    for (int h = 0; h < N; ++h)
        ANVIL_UNROLL
        for (int z = 0; z < Z; ++z) sum[h][z] = _mm512_setzero_ps();
    walk_positions(kv, s, block_table, first, count, [&](int j, size_t at) {
        const Element* v = values + at + i;
        __m512 vz[Z];
        ANVIL_UNROLL
        for (int z = 0; z < Z; ++z) vz[z] = load16(v + 16 * z);
        ANVIL_UNROLL
        for (int h = 0; h < N; ++h) {
            const __m512 p = _mm512_set1_ps(scores[size_t(h) * count + j]);
            ANVIL_UNROLL
            for (int z = 0; z < Z; ++z) sum[h][z] = _mm512_fmadd_ps(p, vz[z], sum[h][z]);
        }
    });
    ANVIL_UNROLL
    for (int h = 0; h < N; ++h)
        ANVIL_UNROLL
        for (int z = 0; z < Z; ++z) _mm512_storeu_ps(out + h * d + i + 16 * z, sum[h][z]);
}

// As many columns a walk as N heads' sums fit in 16 registers (64 for four heads, 128 for two).
template <int N, typename Element>
int weigh_all(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int first, const Element* values, int count,
              const float* scores, float* out) {
    constexpr int kMost = 16 / N;  // registers of sums per head
    const int d = kv.head_dim;
    int i = 0;
    while (d - i >= 16) {
        const int left = (d - i) / 16;
        if (kMost >= 8 && left >= 8) weigh<N, (kMost >= 8 ? 8 : 1), Element>(kv, s, block_table, first, values, count, i, scores, out), i += 128;
        else if (kMost >= 4 && left >= 4) weigh<N, (kMost >= 4 ? 4 : 1), Element>(kv, s, block_table, first, values, count, i, scores, out), i += 64;
        else if (left >= 2) weigh<N, 2, Element>(kv, s, block_table, first, values, count, i, scores, out), i += 32;
        else weigh<N, 1, Element>(kv, s, block_table, first, values, count, i, scores, out), i += 16;
    }
    return i;
}

template <typename Element>
int weigh_values(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int first, const Element* values,
                 int count, int heads, const float* scores, float* out) {
    switch (heads) {
        case 1: return weigh_all<1, Element>(kv, s, block_table, first, values, count, scores, out);
        case 2: return weigh_all<2, Element>(kv, s, block_table, first, values, count, scores, out);
        case 3: return weigh_all<3, Element>(kv, s, block_table, first, values, count, scores, out);
        default: return weigh_all<4, Element>(kv, s, block_table, first, values, count, scores, out);
    }
}

}  // namespace

int weigh_values_avx512(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int first, const float* values,
                        int count, int heads, const float* scores, float* out) {
    return weigh_values(kv, s, block_table, first, values, count, heads, scores, out);
}

int weigh_values_avx512(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int first, const uint16_t* values,
                        int count, int heads, const float* scores, float* out) {
    return weigh_values(kv, s, block_table, first, values, count, heads, scores, out);
}

}  // namespace anvil::kernels
