// AVX2/FMA products, the baseline: 8 lanes, the same tiling as the AVX-512 file.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/matmul.hpp"

// The accumulators must live in registers: fully unroll the loops over the tile's rows and
// tokens (GCC at -O2 kept them on the stack, a store-to-load chain through every FMA).
#define ANVIL_UNROLL _Pragma("GCC unroll 16")

namespace anvil::kernels::detail {
namespace {

constexpr int kLanes = 8;
constexpr int kTokenChunk = 64;
constexpr int kMaxMatrices = kMaxMatmulGroup;
constexpr double kParallelWork = 1 << 17;  // multiply-adds below which one thread does it all

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

inline const void* row_pointer(const WeightMatrix& w, int r) {
    const size_t offset = size_t(r) * w.cols;
    switch (w.type) {
        case WeightType::F32: return static_cast<const float*>(w.data) + offset;
        case WeightType::BF16: return static_cast<const uint16_t*>(w.data) + offset;
        case WeightType::Q8: return static_cast<const int8_t*>(w.data) + offset;
    }
    return nullptr;
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

// Row tile `rt` of w for tokens c0..c1.
template <WeightType T, int RT, int TT>
void row_tile(const WeightMatrix& w, int rt, const float* x, const QuantizedInput* qx, int c0, int c1, float* y) {
    const int r0 = rt * RT;
    if (r0 + RT <= w.rows) {
        int t = c0;
        for (; t + TT <= c1; t += TT) tile<T, RT, TT>(w, r0, x, qx, t, y);
        for (; t < c1; ++t) tile<T, RT, 1>(w, r0, x, qx, t, y);
    } else {
        for (int r = r0; r < w.rows; ++r) {
            int t = c0;
            for (; t + TT <= c1; t += TT) tile<T, 1, TT>(w, r, x, qx, t, y);
            for (; t < c1; ++t) tile<T, 1, 1>(w, r, x, qx, t, y);
        }
    }
}

// Several matrices of one format and width applied to the same input share one parallel region:
// on a busy machine every region's end waits for its slowest thread.
template <WeightType T, int RT, int TT>
void run(const WeightMatrix* ws, float* const* ys, int count, const float* x, const QuantizedInput* qx, int n_tokens) {
    int first_tile[kMaxMatrices + 1] = {0};
    double work = 0;
    for (int m = 0; m < count; ++m) {
        first_tile[m + 1] = first_tile[m] + (ws[m].rows + RT - 1) / RT;
        work += double(ws[m].rows) * ws[m].cols * n_tokens;
    }
    const int tiles = first_tile[count];
    // Small products are not worth waking the other threads for.
#pragma omp parallel if (work >= kParallelWork)
    for (int c0 = 0; c0 < n_tokens; c0 += kTokenChunk) {
        const int c1 = std::min(n_tokens, c0 + kTokenChunk);
        // Dynamic: a thread the OS preempts does not hold the others up. Chunks are independent,
        // so no barrier between them.
#pragma omp for schedule(dynamic, 8) nowait
        for (int item = 0; item < tiles; ++item) {
            int m = 0;
            while (item >= first_tile[m + 1]) ++m;
            row_tile<T, RT, TT>(ws[m], item - first_tile[m], x, qx, c0, c1, ys[m]);
        }
    }
}

}  // namespace

void matmul_avx2(const WeightMatrix* ws, float* const* ys, int count, const float* x, const QuantizedInput* qx,
                 int n_tokens) {
    switch (ws[0].type) {
        case WeightType::F32: return run<WeightType::F32, 4, 2>(ws, ys, count, x, qx, n_tokens);
        case WeightType::BF16: return run<WeightType::BF16, 4, 2>(ws, ys, count, x, qx, n_tokens);
        case WeightType::Q8: return run<WeightType::Q8, 2, 2>(ws, ys, count, x, qx, n_tokens);
    }
}

}  // namespace anvil::kernels::detail
