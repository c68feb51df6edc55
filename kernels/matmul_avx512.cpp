// AVX-512 products: 16 lanes, each (row, token) one accumulator, rows x tokens tiles so that one
// weight load serves several tokens during prefill. Compiled with -mavx512f/bw/vl/dq.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/matmul.hpp"
#include "kernels/matmul_tiling.hpp"

// The accumulators must live in registers: fully unroll the loops over the tile's rows and
// tokens (GCC at -O2 kept them on the stack, a store-to-load chain through every FMA).
#define ANVIL_UNROLL _Pragma("GCC unroll 16")

namespace anvil::kernels::detail {
namespace {

constexpr int kLanes = 16;

template <WeightType T>
inline __m512 load_weights(const void* row, int k) {
    if constexpr (T == WeightType::F32) {
        return _mm512_loadu_ps(static_cast<const float*>(row) + k);
    } else if constexpr (T == WeightType::BF16) {
        __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(row) + k));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
    } else if constexpr (T == WeightType::F16) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(row) + k)));
    } else {
        __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(row) + k));
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes));
    }
}

template <WeightType T>
inline __m512 load_weights_tail(const void* row, int k, __mmask16 mask) {
    if constexpr (T == WeightType::F32) {
        return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(row) + k);
    } else if constexpr (T == WeightType::F16) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(row) + k));
    } else {
        static_assert(T == WeightType::BF16, "q8 rows are whole groups");
        __m256i half = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(row) + k);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
    }
}

// RT rows starting at r0 times TT tokens starting at t0.
template <WeightType T, int RT, int TT>
void tile(const WeightMatrix& w, int r0, const float* x, const QuantizedInput* qx, int t0, float* y) {
    const int cols = w.cols;
    const void* rows[RT];
    ANVIL_UNROLL
    for (int r = 0; r < RT; ++r) rows[r] = row_pointer(w, r0 + r);
    const float* xs[TT];
    ANVIL_UNROLL
    for (int t = 0; t < TT; ++t) xs[t] = x + size_t(t0 + t) * cols;
    __m512 acc[RT][TT];
    ANVIL_UNROLL
    for (int r = 0; r < RT; ++r)
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) acc[r][t] = _mm512_setzero_ps();

    if constexpr (T == WeightType::Q8) {
        // int8 x int8 as in matmul_avx2.cpp, two groups a vector: vpmaddubsw takes the
        // activations' magnitudes and the weights with the activations' signs (a masked negation:
        // AVX-512 has no vpsignb), vpmaddwd by ones adds pairs. Lanes 0-7 hold the first group's
        // sums, 8-15 the second's, each scaled by its own group's scales.
        const int groups = cols / kQ8Group;
        const int8_t* xq[TT];
        const float* xscale[TT];
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) {
            xq[t] = qx->values + size_t(t0 + t) * cols;
            xscale[t] = qx->scales + size_t(t0 + t) * groups;
        }
        const float* wscale[RT];
        ANVIL_UNROLL
        for (int r = 0; r < RT; ++r) wscale[r] = w.scales + size_t(r0 + r) * groups;
        const __m512i ones = _mm512_set1_epi16(1);
        const __m512i zero = _mm512_setzero_si512();
        // Two consecutive groups' scales over the lanes their sums land in; a lone last group
        // repeats its own.
        const auto spread = [](const float* scales, bool pair) {
            const __m512i index = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
            const __m128 two = pair ? _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i_u*>(scales))) : _mm_set1_ps(scales[0]);
            return _mm512_permutexvar_ps(index, _mm512_castps128_ps512(two));
        };
        const auto step = [&](int k, __mmask64 in_row, bool pair) {
            const int g = k / kQ8Group;
            __m512i magnitude[TT];
            __mmask64 negative[TT];
            __m512 x_scale[TT];
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) {
                const __m512i v = _mm512_maskz_loadu_epi8(in_row, xq[t] + k);
                magnitude[t] = _mm512_abs_epi8(v);
                negative[t] = _mm512_movepi8_mask(v);
                x_scale[t] = spread(xscale[t] + g, pair);
            }
            ANVIL_UNROLL
            for (int r = 0; r < RT; ++r) {
                const int8_t* row = static_cast<const int8_t*>(rows[r]) + k;
                const __m512i wv = _mm512_maskz_loadu_epi8(in_row, row);
                _mm_prefetch(reinterpret_cast<const char*>(row) + size_t(RT) * cols, _MM_HINT_T0);
                const __m512 w_scale = spread(wscale[r] + g, pair);
                ANVIL_UNROLL
                for (int t = 0; t < TT; ++t) {
                    const __m512i signed_w = _mm512_mask_sub_epi8(wv, negative[t], zero, wv);
                    const __m512i pairs = _mm512_maddubs_epi16(magnitude[t], signed_w);
                    const __m512 dot = _mm512_cvtepi32_ps(_mm512_madd_epi16(pairs, ones));
                    acc[r][t] = _mm512_fmadd_ps(dot, _mm512_mul_ps(w_scale, x_scale[t]), acc[r][t]);
                }
            }
        };
        int k = 0;
        for (; k + 2 * kQ8Group <= cols; k += 2 * kQ8Group) step(k, ~__mmask64(0), true);
        if (k < cols) step(k, __mmask64(0xffffffffu), false);  // one group left: rows are whole groups
    } else {
        int k = 0;
        if constexpr (T == WeightType::BF16) {
            // 32 weights a step, as matmul_avx2.cpp's bf16 tiles: a 64-byte load's 16 pairs are the
            // even weights (low halves shifted up) and the odd ones (high halves masked), against
            // activations split the same way (x is split_pairs' layout); the leftover 16 and tail
            // below take them as they are.
            const __m512i high = _mm512_set1_epi32(int(0xffff0000u));
            for (; k + 2 * kLanes <= cols; k += 2 * kLanes) {
                __m512 even_x[TT], odd_x[TT];
                ANVIL_UNROLL
                for (int t = 0; t < TT; ++t) {
                    even_x[t] = _mm512_loadu_ps(xs[t] + k);
                    odd_x[t] = _mm512_loadu_ps(xs[t] + k + kLanes);
                }
                ANVIL_UNROLL
                for (int r = 0; r < RT; ++r) {
                    const char* here = static_cast<const char*>(rows[r]) + 2 * size_t(k);
                    _mm_prefetch(here + kPrefetchNear, _MM_HINT_T0);  // each step is one cache line
                    _mm_prefetch(here + 2 * size_t(RT) * cols, _MM_HINT_T1);
                    const __m512i pairs = _mm512_loadu_si512(here);
                    const __m512 even_w = _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
                    const __m512 odd_w = _mm512_castsi512_ps(_mm512_and_si512(pairs, high));
                    ANVIL_UNROLL
                    for (int t = 0; t < TT; ++t) {
                        acc[r][t] = _mm512_fmadd_ps(even_w, even_x[t], acc[r][t]);
                        acc[r][t] = _mm512_fmadd_ps(odd_w, odd_x[t], acc[r][t]);
                    }
                }
            }
        }
        for (; k + kLanes <= cols; k += kLanes) {
            __m512 xv[TT];
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) xv[t] = _mm512_loadu_ps(xs[t] + k);
            ANVIL_UNROLL
            for (int r = 0; r < RT; ++r) {
                const __m512 wv = load_weights<T>(rows[r], k);
                // Once a cache line: 1 KB ahead in the row into L1, the next tile's line at this
                // offset into L2 (as matmul_avx2.cpp's float tiles): for f32 always (4-16% slower
                // without at 1024-4096 columns), for f16 short rows only (kShortRowBytes; 6-25%
                // faster without at 2816-14336 columns).
                constexpr int kBytes = T == WeightType::F32 ? 4 : 2;
                if ((k * kBytes) % 64 == 0) {
                    const char* here = static_cast<const char*>(rows[r]) + kBytes * size_t(k);
                    _mm_prefetch(here + kPrefetchNear, _MM_HINT_T0);
                    if (T == WeightType::F32 || kBytes * size_t(cols) <= kShortRowBytes)
                        _mm_prefetch(here + kBytes * size_t(RT) * cols, _MM_HINT_T1);
                }
                ANVIL_UNROLL
                for (int t = 0; t < TT; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
            }
        }
        if (k < cols) {
            const __mmask16 mask = __mmask16((1u << (cols - k)) - 1);
            __m512 xv[TT];
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) xv[t] = _mm512_maskz_loadu_ps(mask, xs[t] + k);
            ANVIL_UNROLL
            for (int r = 0; r < RT; ++r) {
                const __m512 wv = load_weights_tail<T>(rows[r], k, mask);
                ANVIL_UNROLL
                for (int t = 0; t < TT; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
            }
        }
    }
    ANVIL_UNROLL
    for (int r = 0; r < RT; ++r)
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) y[size_t(t0 + t) * w.rows + r0 + r] = _mm512_reduce_add_ps(acc[r][t]);
}

// One token's activations as the bf16 tiles read them: each whole 32 as its 16 even then its 16 odd
// values, any after that as they are.
void split_pairs(const float* x, int cols, float* split) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    int k = 0;
    for (; k + 2 * kLanes <= cols; k += 2 * kLanes) {
        const __m512 a = _mm512_loadu_ps(x + k), b = _mm512_loadu_ps(x + k + kLanes);
        _mm512_storeu_ps(split + k, _mm512_permutex2var_ps(a, even, b));
        _mm512_storeu_ps(split + k + kLanes, _mm512_permutex2var_ps(a, odd, b));
    }
    std::memcpy(split + k, x + k, sizeof(float) * size_t(cols - k));
}

// The shape run_tiles() asks for.
template <WeightType T, int RT, int TT>
struct Tile {
    static void run(const WeightMatrix& w, int r0, const float* x, const QuantizedInput* qx, int t0, float* y) {
        tile<T, RT, TT>(w, r0, x, qx, t0, y);
    }
};

}  // namespace

void matmul_avx512(const WeightMatrix* ws, float* const* ys, int count, const float* x, const QuantizedInput* qx,
                   int n_tokens) {
    switch (ws[0].type) {
        // One token takes 8 rows a tile, as bf16's below: eight FMA chains for the two pipes.
        case WeightType::F32:
            if (n_tokens == 1) return run_tiles<Tile, WeightType::F32, 8, 1>(ws, ys, count, x, qx, n_tokens);
            return run_tiles<Tile, WeightType::F32, 4, 4>(ws, ys, count, x, qx, n_tokens);
        case WeightType::BF16: {
            // Per thread (each of a team's threads splits its own copy), grown only.
            thread_local std::vector<float> split;
            const int cols = ws[0].cols;
            if (split.size() < size_t(n_tokens) * cols) split.resize(size_t(n_tokens) * cols);
            for (int t = 0; t < n_tokens; ++t) split_pairs(x + size_t(t) * cols, cols, split.data() + size_t(t) * cols);
            // One token takes 8 rows a tile: 8 independent sums for the two FMA pipes.
            if (n_tokens == 1) return run_tiles<Tile, WeightType::BF16, 8, 1>(ws, ys, count, split.data(), qx, n_tokens);
            return run_tiles<Tile, WeightType::BF16, 4, 4>(ws, ys, count, split.data(), qx, n_tokens);
        }
        case WeightType::F16:
            if (n_tokens == 1) return run_tiles<Tile, WeightType::F16, 8, 1>(ws, ys, count, x, qx, n_tokens);
            return run_tiles<Tile, WeightType::F16, 4, 4>(ws, ys, count, x, qx, n_tokens);
        case WeightType::Q8: return run_tiles<Tile, WeightType::Q8, 4, 2>(ws, ys, count, x, qx, n_tokens);
        case WeightType::Q8Packed: break;  // matmul_group_with sends it to the VNNI kernels only
        case WeightType::Q8Packed8: break;  // and this to matmul_avx2_packed8
        case WeightType::Q4_0:
        case WeightType::Q4_K:
        case WeightType::Q6_K:
        case WeightType::Q4_KPacked8:
        case WeightType::Q6_KPacked8:
        case WeightType::Q4_0Packed8:
        case WeightType::Q6_KPacked8Avx2: break;  // and GGUF blocks to the block kernels (matmul.cpp)
    }
}

}  // namespace anvil::kernels::detail
