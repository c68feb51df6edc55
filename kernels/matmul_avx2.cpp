// AVX2/FMA products, the baseline: 8 lanes, the same tiling as the AVX-512 file.
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

constexpr int kLanes = 8;

template <WeightType T>
inline __m256 load_weights(const void* row, int k) {
    if constexpr (T == WeightType::F32) {
        return _mm256_loadu_ps(static_cast<const float*>(row) + k);
    } else if constexpr (T == WeightType::BF16) {
        __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(row) + k));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
    } else if constexpr (T == WeightType::F16) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(row) + k)));
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
        static_assert(T == WeightType::BF16 || T == WeightType::F16, "q8 rows are whole groups");
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
        // int8 x int8, as llama.cpp's q8_0 x q8_0: vpmaddubsw multiplies unsigned bytes by signed
        // ones, so the activations go in as magnitudes and their signs move onto the weights
        // (vpsignb; exact, weights lie in [-127, 127]). A pair's sum is at most 2 x 127 x 127,
        // inside int16; vpmaddwd by ones then adds pairs into eight int32 lanes.
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
        const __m256i ones = _mm256_set1_epi16(1);
        for (int g = 0; g < groups; ++g) {
            const int k = g * kQ8Group;
            __m256i xv[TT], magnitude[TT];
            __m256 x_scale[TT];
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) {
                xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[t] + k));
                magnitude[t] = _mm256_abs_epi8(xv[t]);
                x_scale[t] = _mm256_broadcast_ss(xscale[t] + g);
            }
            ANVIL_UNROLL
            for (int r = 0; r < RT; ++r) {
                const int8_t* row = static_cast<const int8_t*>(rows[r]) + k;
                const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row));
                // The next tile's bytes at the same offset: a tile's rows are too short for the
                // hardware prefetcher to get ahead of (as in matmul_avx512vnni.cpp).
                _mm_prefetch(reinterpret_cast<const char*>(row) + size_t(RT) * cols, _MM_HINT_T0);
                // Scales broadcast straight from memory (a load, not a shuffle) and multiplied as
                // vectors: the shuffle port is the one the byte products need.
                const __m256 w_scale = _mm256_broadcast_ss(wscale[r] + g);
                ANVIL_UNROLL
                for (int t = 0; t < TT; ++t) {
                    const __m256i pairs = _mm256_maddubs_epi16(magnitude[t], _mm256_sign_epi8(wv, xv[t]));
                    // Each lane: four products, at most 4 x 127 x 127: exact in a float.
                    const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
                    acc[r][t] = _mm256_fmadd_ps(dot, _mm256_mul_ps(w_scale, x_scale[t]), acc[r][t]);
                }
            }
        }
    } else {
        int k = 0;
        if constexpr (T == WeightType::BF16) {
            // 16 weights a step: a 32-byte load holds 8 bf16 pairs, and each pair's low half shifted
            // up and its high half masked are the even and the odd weights as f32, which meet the
            // activations split the same way (x is split_pairs' layout). Two instructions for 16
            // weights where widening takes four (vpmovzxwd and a shift, twice); the leftover 8 and
            // tail below take the activations as they are. Every tile shape sums in this order.
            const __m256i high = _mm256_set1_epi32(int(0xffff0000u));
            // The next tile in address order (below) only while it fits in L1 beside this one:
            // a longer tile's first lines are gone before it runs, and the requests crowd out
            // this tile's own. Paired from memory (Zen 5 VM): 1024 columns (16 KB tiles) gain
            // from it as measured below; 2816 columns 8-13% faster without, 4096 13-19%, 14336
            // 24-31%, one and two threads, which is every matrix of a real 7B model.
            const bool next_tile_fits = size_t(RT) * size_t(cols) * 2 <= kNextTileBytes;
            for (; k + 2 * kLanes <= cols; k += 2 * kLanes) {
                __m256 even_x[TT], odd_x[TT];
                ANVIL_UNROLL
                for (int t = 0; t < TT; ++t) {
                    even_x[t] = _mm256_loadu_ps(xs[t] + k);
                    odd_x[t] = _mm256_loadu_ps(xs[t] + k + kLanes);
                }
                ANVIL_UNROLL
                for (int r = 0; r < RT; ++r) {
                    const char* here = static_cast<const char*>(rows[r]) + 2 * size_t(k);
                    if (k % 32 == 0) {  // once a cache line, as below
                        _mm_prefetch(here + kPrefetchNear, _MM_HINT_T0);
                        // And a line of the next tile in address order into L1, rather than its
                        // line at this offset into L2 as the float tiles below: the next tile
                        // then arrives as one sequential stream, not eight a row apart. Decode
                        // from memory, 1024 columns (Zen 5 VM, old and new paired in one
                        // process): 6-16% faster on two threads, 14% on one; 2816 columns within
                        // noise. The float tiles and the AVX-512 levels' bf16 gained nothing so.
                        if (next_tile_fits) {
                            const size_t tile_line = size_t(k / 32) * RT + size_t(r);
                            _mm_prefetch(static_cast<const char*>(rows[0]) + 2 * size_t(RT) * cols + tile_line * 64, _MM_HINT_T0);
                        }
                    }
                    const __m256i pairs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(here));
                    const __m256 even_w = _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16));
                    const __m256 odd_w = _mm256_castsi256_ps(_mm256_and_si256(pairs, high));
                    ANVIL_UNROLL
                    for (int t = 0; t < TT; ++t) {
                        acc[r][t] = _mm256_fmadd_ps(even_w, even_x[t], acc[r][t]);
                        acc[r][t] = _mm256_fmadd_ps(odd_w, odd_x[t], acc[r][t]);
                    }
                }
            }
        }
        for (; k + kLanes <= cols; k += kLanes) {
            __m256 xv[TT];
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) xv[t] = _mm256_loadu_ps(xs[t] + k);
            ANVIL_UNROLL
            for (int r = 0; r < RT; ++r) {
                const __m256 wv = load_weights<T>(rows[r], k);
                // Once a cache line (4 steps of 8 two-byte weights): 1 KB ahead in the row into
                // L1, and for short rows the next tile's line at this offset into L2 (the hardware
                // prefetcher does not get ahead of them; kShortRowBytes). Not for f32: it reads a line in two plain loads,
                // and there the requests only competed with the loads for the line fill buffers
                // (Zen 5 VM, old and new paired in one process, from memory: 1024 and 2816
                // columns, one and two threads, 4-27% faster without; f16 and bf16 8-18% slower
                // without, AVX-512 f32 within noise).
                if constexpr (T != WeightType::F32) {
                    if ((k / kLanes) % 4 == 0) {
                        const char* here = static_cast<const char*>(rows[r]) + 2 * size_t(k);
                        _mm_prefetch(here + kPrefetchNear, _MM_HINT_T0);
                        if (2 * size_t(cols) <= kShortRowBytes) _mm_prefetch(here + 2 * size_t(RT) * cols, _MM_HINT_T1);
                    }
                }
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

// One token's activations as the bf16 tiles read them: each whole 16 as its 8 even then its 8 odd
// values, any after that as they are.
void split_pairs(const float* x, int cols, float* split) {
    int k = 0;
    for (; k + 2 * kLanes <= cols; k += 2 * kLanes) {
        const __m256 a = _mm256_loadu_ps(x + k), b = _mm256_loadu_ps(x + k + kLanes);
        // Within each 128-bit half: a's two and b's two; the 64-bit order 0, 2, 1, 3 joins them.
        const __m256 even = _mm256_shuffle_ps(a, b, 0x88), odd = _mm256_shuffle_ps(a, b, 0xdd);
        _mm256_storeu_ps(split + k, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), 0xd8)));
        _mm256_storeu_ps(split + k + kLanes, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(odd), 0xd8)));
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

void matmul_avx2(const WeightMatrix* ws, float* const* ys, int count, const float* x, const QuantizedInput* qx,
                 int n_tokens) {
    switch (ws[0].type) {
        // One token (decode) takes 8 rows a tile: eight independent sums keep both FMA pipes busy
        // where four left them half idle (one thread's bf16 matvec 14 -> 20 GB/s); batches take
        // 4 x 2, whose weight loads serve two tokens. A sum's order is the same in either.
        case WeightType::F32:
            if (n_tokens == 1) return run_tiles<Tile, WeightType::F32, 8, 1>(ws, ys, count, x, qx, n_tokens);
            return run_tiles<Tile, WeightType::F32, 4, 2>(ws, ys, count, x, qx, n_tokens);
        case WeightType::BF16: {
            // Per thread (each of a team's threads splits its own copy), grown only.
            thread_local std::vector<float> split;
            const int cols = ws[0].cols;
            if (split.size() < size_t(n_tokens) * cols) split.resize(size_t(n_tokens) * cols);
            for (int t = 0; t < n_tokens; ++t) split_pairs(x + size_t(t) * cols, cols, split.data() + size_t(t) * cols);
            if (n_tokens == 1) return run_tiles<Tile, WeightType::BF16, 8, 1>(ws, ys, count, split.data(), qx, n_tokens);
            return run_tiles<Tile, WeightType::BF16, 4, 2>(ws, ys, count, split.data(), qx, n_tokens);
        }
        case WeightType::F16:
            if (n_tokens == 1) return run_tiles<Tile, WeightType::F16, 8, 1>(ws, ys, count, x, qx, n_tokens);
            return run_tiles<Tile, WeightType::F16, 4, 2>(ws, ys, count, x, qx, n_tokens);
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
