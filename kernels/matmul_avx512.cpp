// AVX-512 products: 16 lanes, each (row, token) one accumulator, rows x tokens tiles so that one
// weight load serves several tokens during prefill. Compiled with -mavx512f/bw/vl/dq.
#include <immintrin.h>

#include <cstdint>

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
    } else {
        __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(row) + k));
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes));
    }
}

template <WeightType T>
inline __m512 load_weights_tail(const void* row, int k, __mmask16 mask) {
    if constexpr (T == WeightType::F32) {
        return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(row) + k);
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
        const int groups = cols / kQ8Group;
        const int16_t* xq[TT];
        const float* xscale[TT];
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) {
            xq[t] = qx->values + size_t(t0 + t) * cols;
            xscale[t] = qx->scales + size_t(t0 + t) * groups;
        }
        for (int g = 0; g < groups; ++g) {
            const int k = g * kQ8Group;
            __m512i xv[TT];
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) xv[t] = _mm512_loadu_si512(xq[t] + k);
            ANVIL_UNROLL
            for (int r = 0; r < RT; ++r) {
                const __m512i w16 = _mm512_cvtepi8_epi16(
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const int8_t*>(rows[r]) + k)));
                const float weight_scale = w.scales[size_t(r0 + r) * groups + g];
                ANVIL_UNROLL
                for (int t = 0; t < TT; ++t) {
                    // Pairs of int8 x int16 products summed in int32: at most 2 * 127 * 32767, exact in a float.
                    const __m512 dot = _mm512_cvtepi32_ps(_mm512_madd_epi16(w16, xv[t]));
                    acc[r][t] = _mm512_fmadd_ps(dot, _mm512_set1_ps(weight_scale * xscale[t][g]), acc[r][t]);
                }
            }
        }
    } else {
        int k = 0;
        for (; k + kLanes <= cols; k += kLanes) {
            __m512 xv[TT];
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) xv[t] = _mm512_loadu_ps(xs[t] + k);
            ANVIL_UNROLL
            for (int r = 0; r < RT; ++r) {
                const __m512 wv = load_weights<T>(rows[r], k);
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
        case WeightType::F32: return run_tiles<Tile, WeightType::F32, 4, 4>(ws, ys, count, x, qx, n_tokens);
        case WeightType::BF16: return run_tiles<Tile, WeightType::BF16, 4, 4>(ws, ys, count, x, qx, n_tokens);
        case WeightType::Q8: return run_tiles<Tile, WeightType::Q8, 4, 2>(ws, ys, count, x, qx, n_tokens);
        case WeightType::Q8Packed: break;  // matmul_group_with sends it to the VNNI kernels only
    }
}

}  // namespace anvil::kernels::detail
