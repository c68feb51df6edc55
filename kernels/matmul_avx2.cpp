// AVX2/FMA products, the baseline: 8 lanes, the same tiling as the AVX-512 file.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/matmul.hpp"
#include "kernels/matmul_tiling.hpp"

// The accumulators must live in registers: fully unroll the loops over the tile's rows and
// tokens (GCC at -O2 kept them on the stack, a store-to-load chain through every FMA).
#define ANVIL_UNROLL _Pragma("GCC unroll 16")

namespace anvil::kernels::detail {
namespace {

constexpr int kLanes = 8;

template <WeightType T>
inline __m256 load_weights(const void* row, int k) {
    if constexpr (T == WeightType::F32) {
        return _mm256_loadu_ps(static_cast<const float*>(row) + k);
    } else if constexpr (T == WeightType::BF16) {
        __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(row) + k));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
    } else {
        __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(row) + k));
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
    }
}

// The last partial vector of a row, zero-filled through a small buffer.
template <WeightType T>
inline __m256 load_weights_tail(const void* row, int k, int count) {
    if constexpr (T == WeightType::F32) {
        float buffer[kLanes] = {};
        std::memcpy(buffer, static_cast<const float*>(row) + k, sizeof(float) * count);
        return _mm256_loadu_ps(buffer);
    } else {
        static_assert(T == WeightType::BF16, "q8 rows are whole groups");
        uint16_t buffer[kLanes] = {};
        std::memcpy(buffer, static_cast<const uint16_t*>(row) + k, sizeof(uint16_t) * count);
        return load_weights<T>(buffer, 0);
    }
}

inline __m256 load_x_tail(const float* x, int count) {
    float buffer[kLanes] = {};
    std::memcpy(buffer, x, sizeof(float) * count);
    return _mm256_loadu_ps(buffer);
}

inline float horizontal_sum(__m256 v) {
    __m128 low = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 high = _mm_movehdup_ps(low);
    __m128 sum = _mm_add_ps(low, high);
    high = _mm_movehl_ps(high, sum);
    return _mm_cvtss_f32(_mm_add_ss(sum, high));
}

template <WeightType T, int RT, int TT>
void tile(const WeightMatrix& w, int r0, const float* x, const QuantizedInput* qx, int t0, float* y) {
    const int cols = w.cols;
    const void* rows[RT];
    ANVIL_UNROLL
    for (int r = 0; r < RT; ++r) rows[r] = row_pointer(w, r0 + r);
    const float* xs[TT];
    ANVIL_UNROLL
    for (int t = 0; t < TT; ++t) xs[t] = x + size_t(t0 + t) * cols;
    __m256 acc[RT][TT];
    ANVIL_UNROLL
    for (int r = 0; r < RT; ++r)
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) acc[r][t] = _mm256_setzero_ps();

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
            __m256i xa[TT], xb[TT];
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) {
                xa[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[t] + k));
                xb[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[t] + k + 16));
            }
            ANVIL_UNROLL
            for (int r = 0; r < RT; ++r) {
                const int8_t* row = static_cast<const int8_t*>(rows[r]) + k;
                const __m256i wa = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row)));
                const __m256i wb = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16)));
                const float weight_scale = w.scales[size_t(r0 + r) * groups + g];
                ANVIL_UNROLL
                for (int t = 0; t < TT; ++t) {
                    // At most 4 * 127 * 32767 per lane: exact in int32 and in a float.
                    const __m256i sum = _mm256_add_epi32(_mm256_madd_epi16(wa, xa[t]), _mm256_madd_epi16(wb, xb[t]));
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(weight_scale * xscale[t][g]),
                                                acc[r][t]);
                }
            }
        }
    } else {
        int k = 0;
        for (; k + kLanes <= cols; k += kLanes) {
            __m256 xv[TT];
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) xv[t] = _mm256_loadu_ps(xs[t] + k);
            ANVIL_UNROLL
            for (int r = 0; r < RT; ++r) {
                const __m256 wv = load_weights<T>(rows[r], k);
                ANVIL_UNROLL
                for (int t = 0; t < TT; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
            }
        }
        if (k < cols) {
            __m256 xv[TT];
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) xv[t] = load_x_tail(xs[t] + k, cols - k);
            ANVIL_UNROLL
            for (int r = 0; r < RT; ++r) {
                const __m256 wv = load_weights_tail<T>(rows[r], k, cols - k);
                ANVIL_UNROLL
                for (int t = 0; t < TT; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
            }
        }
    }
    ANVIL_UNROLL
    for (int r = 0; r < RT; ++r)
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) y[size_t(t0 + t) * w.rows + r0 + r] = horizontal_sum(acc[r][t]);
}

// The shape run_tiles() asks for.
template <WeightType T, int RT, int TT>
struct Tile {
    static void run(const WeightMatrix& w, int r0, const float* x, const QuantizedInput* qx, int t0, float* y) {
        tile<T, RT, TT>(w, r0, x, qx, t0, y);
    }
};

}  // namespace

void matmul_avx2(const WeightMatrix* ws, float* const* ys, int count, const float* x, const QuantizedInput* qx,
                 int n_tokens) {
    switch (ws[0].type) {
        case WeightType::F32: return run_tiles<Tile, WeightType::F32, 4, 2>(ws, ys, count, x, qx, n_tokens);
        case WeightType::BF16: return run_tiles<Tile, WeightType::BF16, 4, 2>(ws, ys, count, x, qx, n_tokens);
        case WeightType::Q8: return run_tiles<Tile, WeightType::Q8, 2, 2>(ws, ys, count, x, qx, n_tokens);
        case WeightType::Q8Packed: break;  // matmul_group_with sends it to the VNNI kernels only
    }
}

}  // namespace anvil::kernels::detail
