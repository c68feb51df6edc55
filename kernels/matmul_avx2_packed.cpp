// q8 weights packed by 8 rows (WeightType::Q8Packed8) times int8 activations with AVX2: the decode
// product of processors without AVX-512 VNNI. Row-major q8 (matmul_avx2.cpp) leaves each group's
// eight int32 lanes of one row to convert, scale and add on their own; here the 8 lanes are 8
// rows: each step broadcasts 4 activations, vpmaddubsw and vpmaddwd give each row's sum of those
// 4 products, a group's 8 steps add up in int32, and its scales apply once for all 8 rows. About
// two thirds of row-major's instructions per weight byte, and no horizontal sums.
//
// vpmaddubsw multiplies unsigned bytes by signed ones: the activations go in as magnitudes and
// their signs move onto the weights (vpsignb; exact, weights lie in [-127, 127]).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/matmul.hpp"
#include "kernels/matmul_tiling.hpp"

// The accumulators must live in registers (see matmul_avx2.cpp).
#define ANVIL_UNROLL _Pragma("GCC unroll 16")

namespace anvil::kernels::detail {
namespace {

// BT blocks of 8 rows starting at block b0 times TT tokens starting at t0.
template <int BT, int TT>
void packed8_tile(const WeightMatrix& w, int b0, const QuantizedInput* x, int t0, float* y) {
    const int cols = w.cols;
    const int groups = cols / kQ8Group;
    const size_t block_bytes = size_t(cols) * kQ8Pack8Rows;
    const int8_t* blocks[BT];
    ANVIL_UNROLL
    for (int b = 0; b < BT; ++b) blocks[b] = static_cast<const int8_t*>(w.data) + size_t(b0 + b) * block_bytes;
    const int8_t* xs[TT];
    ANVIL_UNROLL
    for (int t = 0; t < TT; ++t) xs[t] = x->values + size_t(t0 + t) * cols;
    __m256 acc[BT][TT];
    ANVIL_UNROLL
    for (int b = 0; b < BT; ++b)
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) acc[b][t] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);

    for (int g = 0; g < groups; ++g) {
        __m256i dot[BT][TT];
        ANVIL_UNROLL
        for (int b = 0; b < BT; ++b)
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) dot[b][t] = _mm256_setzero_si256();
        ANVIL_UNROLL
        for (int quad = 0; quad < kQ8Group / 4; ++quad) {
            const int k = g * kQ8Group + quad * 4;
            __m256i xv[TT], magnitude[TT];
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) {
                int32_t four;
                std::memcpy(&four, xs[t] + k, 4);
                xv[t] = _mm256_set1_epi32(four);
                magnitude[t] = _mm256_abs_epi8(xv[t]);
            }
            ANVIL_UNROLL
            for (int b = 0; b < BT; ++b) {
                const int8_t* at = blocks[b] + size_t(k / 4) * (kQ8Pack8Rows * 4);
                const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
                // A cache line (two steps) at a time, ahead in this block's own stream: 1 KB into
                // L1 and 8 KB into L2.
                if (quad % 2 == 0) {
                    _mm_prefetch(reinterpret_cast<const char*>(at) + kPrefetchNear, _MM_HINT_T0);
                    _mm_prefetch(reinterpret_cast<const char*>(at) + kPrefetchFar, _MM_HINT_T1);
                }
                ANVIL_UNROLL
                for (int t = 0; t < TT; ++t) {
                    // Per lane (a row): 4 products of at most 127 x 127; a group's 8 steps at
                    // most 32 x 127 x 127, exact in int32 and in a float.
                    const __m256i pairs = _mm256_maddubs_epi16(magnitude[t], _mm256_sign_epi8(wv, xv[t]));
                    dot[b][t] = _mm256_add_epi32(dot[b][t], _mm256_madd_epi16(pairs, ones));
                }
            }
        }
        __m256 x_scale[TT];
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) x_scale[t] = _mm256_broadcast_ss(x->scales + size_t(t0 + t) * groups + g);
        ANVIL_UNROLL
        for (int b = 0; b < BT; ++b) {
            const __m256 w_scale =
                _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales_f16 + (size_t(b0 + b) * groups + g) * kQ8Pack8Rows)));
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t)
                acc[b][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[b][t]), _mm256_mul_ps(w_scale, x_scale[t]), acc[b][t]);
        }
    }
    ANVIL_UNROLL
    for (int b = 0; b < BT; ++b) {
        const int r0 = (b0 + b) * kQ8Pack8Rows;
        const int live = std::min(kQ8Pack8Rows, w.rows - r0);
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) {
            float* out = y + size_t(t0 + t) * w.rows + r0;
            if (live == kQ8Pack8Rows) {
                _mm256_storeu_ps(out, acc[b][t]);
            } else {
                float lanes[kQ8Pack8Rows];
                _mm256_storeu_ps(lanes, acc[b][t]);
                std::memcpy(out, lanes, sizeof(float) * size_t(live));
            }
        }
    }
}

// Items of kBlocks blocks (the last may have fewer). Pairs of tokens take two blocks a tile, which
// is as many accumulators as there are registers. A lone token (decode) takes one block a tile: one
// stream of weights. Four blocks a tile (four independent sums per step, but four streams 8 KB
// apart) ran at 0.6 of one thread's read bandwidth on the 2-core EPYC VM, one block at 0.9-1.2
// (decode of the bench model's Q8_0 file, AVX2, 1 thread: 90 -> 140-146 tok/s; llama.cpp's haswell
// build 131-136). The tile prefetches ahead in its own stream, near into L1 and far into L2:
// prefetching the next block at the same offset instead held the Intel VM's decode to 90 rather
// than 111 tok/s on one thread, 213 rather than 267 on two.
constexpr int kBlocks = 4;

void packed8_item(const WeightMatrix& w, int item, const QuantizedInput* x, int c0, int c1, float* y) {
    const int b0 = item * kBlocks;
    const int blocks = std::min(kBlocks, q8_packed8_blocks(w.rows) - b0);
    int t = c0;
    if (blocks == kBlocks) {
        for (; t + 2 <= c1; t += 2) {
            packed8_tile<2, 2>(w, b0, x, t, y);
            packed8_tile<2, 2>(w, b0 + 2, x, t, y);
        }
        if (t < c1)
            for (int b = b0; b < b0 + kBlocks; ++b) packed8_tile<1, 1>(w, b, x, t, y);
    } else {
        for (int b = b0; b < b0 + blocks; ++b) {
            int u = c0;
            for (; u + 2 <= c1; u += 2) packed8_tile<1, 2>(w, b, x, u, y);
            if (u < c1) packed8_tile<1, 1>(w, b, x, u, y);
        }
    }
}

}  // namespace

void matmul_avx2_packed8(const WeightMatrix* ws, float* const* ys, int count, const QuantizedInput* x, int n_tokens) {
    run_items(
        ws, ys, count, n_tokens, [](const WeightMatrix& w) { return (q8_packed8_blocks(w.rows) + kBlocks - 1) / kBlocks; },
        [x](const WeightMatrix& w, int item, int c0, int c1, float* y) { packed8_item(w, item, x, c0, c1, y); });
}

}  // namespace anvil::kernels::detail
