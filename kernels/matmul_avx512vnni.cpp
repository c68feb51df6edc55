// Products of q8 weights with the AVX-512 VNNI dot product. The activations are rounded to int8
// with one scale per group of kQ8Group (largest magnitude / 127), as the weights are, so that each
// vpdpbusd multiplies 64 weight/activation pairs exactly in integers and adds them, four at a
// time, into 16 int32 lanes, where the levels below need vpmaddubsw and vpmaddwd for the same
// (matmul_avx2.cpp, matmul_avx512.cpp). The activations' rounding is every vector level's (half a
// step of their group's largest value / 127, the same order as the weights' own: the q8_0 x q8_0
// product llama.cpp uses), and their int8 values are the same at every level.
//
// vpdpbusd multiplies unsigned bytes by signed ones. The activations go in as magnitudes and their
// signs move onto the weights (a masked negation), which is exact: weights lie in [-127, 127].
// Compiled with -mavx512vnni; called only when the processor has it.
//
// Row-major q8 (what tests and the lower levels use) goes through row tiles as the other levels'
// products do, which leaves a group's eight int32 lanes to scale and add separately for each row.
// The packed layout (WeightType::Q8Packed, which the engine loads q8 weights into on processors
// with VNNI) puts 16 rows in the 16 lanes instead: one vpdpbusd takes 4 inputs of 16 rows, a
// group's sums land one per row, and its scales apply with one multiply-add for all 16. Its bytes
// are stored + 128 so that they can be vpdpbusd's unsigned side; the activations are the signed
// side, and 128 x each group's sum of activations, computed once per token, takes the offset out.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/matmul.hpp"
#include "kernels/matmul_tiling.hpp"

// The accumulators must live in registers (see matmul_avx512.cpp).
#define ANVIL_UNROLL _Pragma("GCC unroll 16")

namespace anvil::kernels::detail {
namespace {

constexpr int kBytes = 64;  // int8 values in one 512-bit vector: two groups

// Two consecutive group scales spread over the lanes their groups' sums land in: lanes 0-7 hold
// the first group's (bytes 0-31), lanes 8-15 the second's. A lone last group repeats its scale.
inline __m512 spread_scales(const float* scales, bool pair) {
    const __m512i index = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m128 two =
        pair ? _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i_u*>(scales))) : _mm_set1_ps(scales[0]);
    return _mm512_permutexvar_ps(index, _mm512_castps128_ps512(two));
}

// RT rows starting at r0 times TT tokens starting at t0.
template <WeightType T, int RT, int TT>
struct Tile {
    static_assert(T == WeightType::Q8, "only q8 weights take this path");
    static void run(const WeightMatrix& w, int r0, const Int8Input* x, const QuantizedInput*, int t0, float* y) {
        const int cols = w.cols;
        const int groups = x->groups;
        const int8_t* rows[RT];
        const float* row_scales[RT];
        ANVIL_UNROLL
        for (int r = 0; r < RT; ++r) {
            rows[r] = static_cast<const int8_t*>(w.data) + size_t(r0 + r) * cols;
            row_scales[r] = w.scales + size_t(r0 + r) * groups;
        }
        const int8_t* xs[TT];
        const float* x_scales[TT];
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) {
            xs[t] = x->values + size_t(t0 + t) * cols;
            x_scales[t] = x->scales + size_t(t0 + t) * groups;
        }
        __m512 acc[RT][TT];
        ANVIL_UNROLL
        for (int r = 0; r < RT; ++r)
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) acc[r][t] = _mm512_setzero_ps();

        const __m512i zero = _mm512_setzero_si512();
        const auto step = [&](int k, __mmask64 in_row, bool pair) {
            const int g = k / kQ8Group;
            __m512i magnitude[TT];
            __mmask64 negative[TT];
            __m512 x_scale[TT];
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) {
                const __m512i v = _mm512_maskz_loadu_epi8(in_row, xs[t] + k);
                magnitude[t] = _mm512_abs_epi8(v);
                negative[t] = _mm512_movepi8_mask(v);
                x_scale[t] = spread_scales(x_scales[t] + g, pair);
            }
            ANVIL_UNROLL
            for (int r = 0; r < RT; ++r) {
                const __m512i wv = _mm512_maskz_loadu_epi8(in_row, rows[r] + k);
                // The next tile's bytes at the same offset: a tile's rows are only a kilobyte or two
                // each, too short for the hardware prefetcher to get ahead of (one thread's q8
                // product went from 14 to 20 GB/s with it).
                _mm_prefetch(reinterpret_cast<const char*>(rows[r] + k) + size_t(RT) * cols, _MM_HINT_T0);
                const __m512 w_scale = spread_scales(row_scales[r] + g, pair);
                ANVIL_UNROLL
                for (int t = 0; t < TT; ++t) {
                    const __m512i signed_w = _mm512_mask_sub_epi8(wv, negative[t], zero, wv);
                    // Each lane: four products of at most 127 x 127; a group's eight lanes are
                    // summed in floats below, exactly (each lane < 2^24).
                    const __m512i dot = _mm512_dpbusd_epi32(zero, magnitude[t], signed_w);
                    acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(w_scale, x_scale[t]), acc[r][t]);
                }
            }
        };
        int k = 0;
        for (; k + kBytes <= cols; k += kBytes) step(k, ~__mmask64(0), true);
        if (k < cols) step(k, __mmask64(0xffffffffu), false);  // one group left: rows are whole groups
        ANVIL_UNROLL
        for (int r = 0; r < RT; ++r)
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) y[size_t(t0 + t) * w.rows + r0 + r] = _mm512_reduce_add_ps(acc[r][t]);
    }
};

// BT blocks of 16 rows starting at block b0 times TT tokens starting at t0, packed layout.
template <int BT, int TT>
void packed_tile(const WeightMatrix& w, int b0, const Int8Input* x, int t0, float* y) {
    const int cols = w.cols;
    const int groups = x->groups;
    const size_t block_bytes = size_t(cols) * kQ8PackRows;
    const uint8_t* blocks[BT];
    ANVIL_UNROLL
    for (int b = 0; b < BT; ++b) blocks[b] = static_cast<const uint8_t*>(w.data) + size_t(b0 + b) * block_bytes;
    const int8_t* xs[TT];
    ANVIL_UNROLL
    for (int t = 0; t < TT; ++t) xs[t] = x->values + size_t(t0 + t) * cols;
    __m512 acc[BT][TT];
    ANVIL_UNROLL
    for (int b = 0; b < BT; ++b)
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) acc[b][t] = _mm512_setzero_ps();

    for (int g = 0; g < groups; ++g) {
        __m512i dot[BT][TT];
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) {
            const __m512i offset = _mm512_set1_epi32(x->offsets[size_t(t0 + t) * groups + g]);
            ANVIL_UNROLL
            for (int b = 0; b < BT; ++b) dot[b][t] = offset;
        }
        ANVIL_UNROLL
        for (int quad = 0; quad < kQ8Group / 4; ++quad) {
            const int k = g * kQ8Group + quad * 4;
            __m512i xv[TT];
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) {
                int32_t four;
                std::memcpy(&four, xs[t] + k, 4);
                xv[t] = _mm512_set1_epi32(four);
            }
            ANVIL_UNROLL
            for (int b = 0; b < BT; ++b) {
                const uint8_t* at = blocks[b] + size_t(k / 4) * (kQ8PackRows * 4);
                const __m512i wv = _mm512_loadu_si512(at);
                // Ahead in this block's own stream, a cache line a step: 1 KB into L1, 8 KB into L2
                // (as matmul_avx2_packed.cpp).
                _mm_prefetch(reinterpret_cast<const char*>(at) + kPrefetchNear, _MM_HINT_T0);
                _mm_prefetch(reinterpret_cast<const char*>(at) + kPrefetchFar, _MM_HINT_T1);
                ANVIL_UNROLL
                for (int t = 0; t < TT; ++t) dot[b][t] = _mm512_dpbusd_epi32(dot[b][t], wv, xv[t]);
            }
        }
        ANVIL_UNROLL
        for (int b = 0; b < BT; ++b) {
            const __m512 w_scale =
                _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.scales_f16 + (size_t(b0 + b) * groups + g) * kQ8PackRows)));
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) {
                const __m512 scale = _mm512_mul_ps(w_scale, _mm512_set1_ps(x->scales[size_t(t0 + t) * groups + g]));
                acc[b][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[b][t]), scale, acc[b][t]);
            }
        }
    }
    ANVIL_UNROLL
    for (int b = 0; b < BT; ++b) {
        const int r0 = (b0 + b) * kQ8PackRows;
        const int live = std::min(kQ8PackRows, w.rows - r0);
        const __mmask16 mask = __mmask16((1u << live) - 1);
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) _mm512_mask_storeu_ps(y + size_t(t0 + t) * w.rows + r0, mask, acc[b][t]);
    }
}

// run_tiles for the packed layout: items of kPackedBlocks blocks (the last may have fewer). A lone
// token takes one block a tile, one stream of weights (two blocks a tile, two streams: bench model's
// Q8_0 file, decode 115-133 -> 123-146 tok/s on one thread, 186-192 -> 212-217 on two), which the
// tile prefetches ahead in: the next block at the same offset instead took the Intel VM's decode
// 98 rather than 111 tok/s on one thread, 217 rather than 254 on two.
constexpr int kPackedBlocks = 2;
constexpr int kPackedTokens = 2;

void packed_item(const WeightMatrix& w, int item, const Int8Input* x, int c0, int c1, float* y, bool amx) {
    const int b0 = item * kPackedBlocks;
    const bool whole = b0 + kPackedBlocks <= q8_packed_blocks(w.rows);
    int t = amx_tokens_end(amx, c0, c1);
    // Each block's weights stay in L1 while the runs of tokens pass them.
    if (t > c0)
        for (int b = b0; b < std::min(b0 + kPackedBlocks, q8_packed_blocks(w.rows)); ++b) amx_packed_block(w, b, x, c0, t, y);
    if (whole) {
        for (; t + kPackedTokens <= c1; t += kPackedTokens) packed_tile<kPackedBlocks, kPackedTokens>(w, b0, x, t, y);
        for (; t < c1; ++t)
            for (int b = b0; b < b0 + kPackedBlocks; ++b) packed_tile<1, 1>(w, b, x, t, y);
    } else {
        for (; t + kPackedTokens <= c1; t += kPackedTokens) packed_tile<1, kPackedTokens>(w, b0, x, t, y);
        for (; t < c1; ++t) packed_tile<1, 1>(w, b0, x, t, y);
    }
}

void run_packed(const WeightMatrix* ws, float* const* ys, int count, const Int8Input* x, int n_tokens, bool amx) {
    run_items(
        ws, ys, count, n_tokens,
        [](const WeightMatrix& w) { return (q8_packed_blocks(w.rows) + kPackedBlocks - 1) / kPackedBlocks; },
        [x, amx](const WeightMatrix& w, int item, int c0, int c1, float* y) { packed_item(w, item, x, c0, c1, y, amx); });
}

// One token's activations to int8, a group of 32 at a time: scale = largest magnitude / 127,
// value = round(x / scale) to nearest even (the conversion's default rounding). Row by row, so
// that a token's rounding never depends on the tokens batched with it.
void quantize_int8(const float* x, int cols, int8_t* values, float* scales, int32_t* offsets) {
    const __m512 sign_bit = _mm512_set1_ps(-0.0f);
    for (int g = 0; g < cols / kQ8Group; ++g) {
        const float* in = x + size_t(g) * kQ8Group;
        const __m512 lo = _mm512_loadu_ps(in);
        const __m512 hi = _mm512_loadu_ps(in + 16);
        const float largest = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign_bit, lo), _mm512_andnot_ps(sign_bit, hi)));
        const float scale = largest / 127.0f;
        const __m512 inverse = _mm512_set1_ps(scale > 0.0f ? 1.0f / scale : 0.0f);
        scales[g] = scale;
        const __m128i q_lo = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(lo, inverse)));
        const __m128i q_hi = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(hi, inverse)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(values + size_t(g) * kQ8Group), q_lo);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(values + size_t(g) * kQ8Group + 16), q_hi);
        const __m512i wide = _mm512_add_epi32(_mm512_cvtepi8_epi32(q_lo), _mm512_cvtepi8_epi32(q_hi));
        offsets[g] = -128 * _mm512_reduce_add_epi32(wide);
    }
}

}  // namespace

void matmul_avx512vnni(const WeightMatrix* ws, float* const* ys, int count, const float* x, const QuantizedInput* qx,
                       int n_tokens, bool amx) {
    const WeightType type = ws[0].type;
    if (type != WeightType::Q8 && type != WeightType::Q8Packed) return matmul_avx512(ws, ys, count, x, qx, n_tokens);
    const int cols = ws[0].cols;
    const int groups = cols / kQ8Group;
    // Grown only, kept per thread: the decode loop reuses them without allocating.
    thread_local std::vector<int8_t> values;
    thread_local std::vector<float> scales;
    thread_local std::vector<int32_t> offsets;
    const size_t n = size_t(n_tokens) * size_t(cols);
    if (values.size() < n) values.resize(n);
    if (scales.size() < n / kQ8Group) scales.resize(n / kQ8Group);
    if (offsets.size() < n / kQ8Group) offsets.resize(n / kQ8Group);
    for (int t = 0; t < n_tokens; ++t)
        quantize_int8(x + size_t(t) * cols, cols, values.data() + size_t(t) * cols, scales.data() + size_t(t) * groups,
                      offsets.data() + size_t(t) * groups);
    const Int8Input input{values.data(), scales.data(), offsets.data(), groups};
    if (type == WeightType::Q8Packed) return run_packed(ws, ys, count, &input, n_tokens, amx);
    // Eight rows a tile: longer runs of contiguous bytes between tiles than four.
    run_tiles<Tile, WeightType::Q8, 8, 2>(ws, ys, count, &input, qx, n_tokens);
}

}  // namespace anvil::kernels::detail
