// The values' pass of decode attention at the AVX-512 levels (see attention_avx512.hpp).
#include <immintrin.h>

#include "kernels/attention_avx512.hpp"

namespace anvil::kernels {
namespace {

#define ANVIL_UNROLL _Pragma("GCC unroll 16")

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

// Columns i .. i + 16Z of N heads: N x Z sums in registers, the lines of these columns asked for
// kAttentionPrefetch positions ahead.
template <int N, int Z, typename Element>
void weigh(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int first, const Element* values, int count,
           int i, const float* scores, float* out) {
    const int d = kv.head_dim;
    __m512 sum[N][Z];
    ANVIL_UNROLL
    for (int h = 0; h < N; ++h)
        ANVIL_UNROLL
        for (int z = 0; z < Z; ++z) sum[h][z] = _mm512_setzero_ps();
    walk_positions_ahead(kv, s, block_table, first, count, kAttentionPrefetch, [&](int j, size_t at, size_t ahead) {
        if (ahead != kNoPosition) {
            const char* line = reinterpret_cast<const char*>(values + ahead + i);
            for (size_t byte = 0; byte < 16 * Z * sizeof(Element); byte += 64) _mm_prefetch(line + byte, _MM_HINT_T1);
        }
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

// N heads' dot products with each position's key: two sums of 16 a head, reduced at the end.
template <int N, typename Element>
void score_all(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int first, const Element* keys, int count,
               const float* q, float scale, float* scores) {
    const int d = kv.head_dim;
    walk_positions_ahead(kv, s, block_table, first, count, kAttentionPrefetch, [&](int j, size_t at, size_t ahead) {
        if (ahead != kNoPosition) prefetch_head(keys + ahead, d);
        const Element* k = keys + at;
        __m512 sum[N][2];
        ANVIL_UNROLL
        for (int h = 0; h < N; ++h) sum[h][0] = sum[h][1] = _mm512_setzero_ps();
        int i = 0;
        for (; i + 32 <= d; i += 32) {
            const __m512 k0 = load16(k + i), k1 = load16(k + i + 16);
            ANVIL_UNROLL
            for (int h = 0; h < N; ++h) {
                sum[h][0] = _mm512_fmadd_ps(_mm512_loadu_ps(q + h * d + i), k0, sum[h][0]);
                sum[h][1] = _mm512_fmadd_ps(_mm512_loadu_ps(q + h * d + i + 16), k1, sum[h][1]);
            }
        }
        if (i < d) {
            const __m512 k0 = load16(k + i);
            ANVIL_UNROLL
            for (int h = 0; h < N; ++h) sum[h][0] = _mm512_fmadd_ps(_mm512_loadu_ps(q + h * d + i), k0, sum[h][0]);
        }
        ANVIL_UNROLL
        for (int h = 0; h < N; ++h) scores[size_t(h) * count + j] = _mm512_reduce_add_ps(_mm512_add_ps(sum[h][0], sum[h][1])) * scale;
    });
}

template <typename Element>
void score_keys(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int first, const Element* keys, int count,
                int heads, const float* q, float scale, float* scores) {
    switch (heads) {
        case 1: return score_all<1, Element>(kv, s, block_table, first, keys, count, q, scale, scores);
        case 2: return score_all<2, Element>(kv, s, block_table, first, keys, count, q, scale, scores);
        case 3: return score_all<3, Element>(kv, s, block_table, first, keys, count, q, scale, scores);
        default: return score_all<4, Element>(kv, s, block_table, first, keys, count, q, scale, scores);
    }
}

}  // namespace

void score_keys_avx512(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int first, const float* keys,
                       int count, int heads, const float* q, float scale, float* scores) {
    score_keys(kv, s, block_table, first, keys, count, heads, q, scale, scores);
}

void score_keys_avx512(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int first, const uint16_t* keys,
                       int count, int heads, const float* q, float scale, float* scores) {
    score_keys(kv, s, block_table, first, keys, count, heads, q, scale, scores);
}

int weigh_values_avx512(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int first, const float* values,
                        int count, int heads, const float* scores, float* out) {
    return weigh_values(kv, s, block_table, first, values, count, heads, scores, out);
}

int weigh_values_avx512(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int first, const uint16_t* values,
                        int count, int heads, const float* scores, float* out) {
    return weigh_values(kv, s, block_table, first, values, count, heads, scores, out);
}

}  // namespace anvil::kernels
