// GGUF's block formats (Q4_0, Q4_K, Q6_K) times int8 activations with AVX2, on the blocks
// interleaved by 8 rows at load (WeightType::Q4_0Packed8, Q4_KPacked8, and Q6_KPacked8Avx2, Q6_K's
// layout for these products; ggml_blocks.hpp): the products of a Q4_K_M model at the AVX2 and
// AVX-512 levels (the VNNI levels: matmul_vnni_blocks.cpp, the same walk with the VNNI dot product
// on Q6_KPacked8). The 8 lanes of a product are 8 rows, so no sum is horizontal. Kernels
// that read the row-major blocks as the file holds them were written first and took about twice the
// instructions per weight (docs/PERFORMANCE.md); row-major blocks now take the plain product
// (matmul_reference.cpp), which the reference level multiplies. 512-bit registers would need yet
// another layout to gain, and llama.cpp's AVX-512 builds run AVX2 code for most of these too.
//
// The activations are rounded as llama.cpp rounds them for the same weights: Q4_0 with int8 per
// group of 32 (its q8_0), Q4_K and Q6_K with int8 per 256 and each 16 and 32 values' sum (its
// q8_K). With one activation scale per super-block, a super-block's sub-block scales multiply the
// integer sums in integers (vpmaddwd by the rows' scales), and the float work is one multiply-add per
// super-block.
//
// vpmaddubsw multiplies unsigned bytes by signed ones. The stored values are unsigned (0..15,
// 0..63) and go in as they are: Q4_K's mins, Q6_K's offset of 32 and Q4_0's offset of 8 are applied
// to the activations' sums instead.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/ggml_blocks.hpp"
#include "kernels/matmul.hpp"
#include "kernels/matmul_blocks_common.hpp"
#include "kernels/matmul_tiling.hpp"

// The accumulators must live in registers (see matmul_avx2.cpp).
#define ANVIL_UNROLL _Pragma("GCC unroll 16")

namespace anvil::kernels::detail {
namespace {

// Q4_K packed by 8 rows (ggml_blocks.hpp): BT blocks of 8 rows from block b0 times TT tokens from
// t0. Each 32-byte step holds 4 bytes of each of 8 rows: its low nibbles meet 4 broadcast
// activations of one sub-block and its high nibbles 4 of the next, so the 8 lanes of a product are
// 8 rows and no sum is horizontal. A sub-block's 8 steps add up in int16 (at most 8 x 2 x 15 x 127
// = 30480), then take the rows' scales with one vpmaddwd; a super-block's mins meet the
// activations' 32-value sums, two sub-blocks per vpmaddwd.
template <int BT, int TT>
void q4_k_packed8_tile(const WeightMatrix& w, int b0, const SuperBlockInput* x, int t0, float* y) {
    const int supers = w.cols / kSuperBlock;
    const size_t block_bytes = size_t(supers) * kQ4_KPacked8Bytes;
    const uint8_t* blocks[BT];
    ANVIL_UNROLL
    for (int b = 0; b < BT; ++b) blocks[b] = static_cast<const uint8_t*>(w.data) + size_t(b0 + b) * block_bytes;
    __m256 acc[BT][TT];
    ANVIL_UNROLL
    for (int b = 0; b < BT; ++b)
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) acc[b][t] = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    // Each row's scale byte into both int16 lanes of its row.
    const __m128i twice = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);

    for (int i = 0; i < supers; ++i) {
        const uint8_t* tiles[BT];
        ANVIL_UNROLL
        for (int b = 0; b < BT; ++b) tiles[b] = blocks[b] + size_t(i) * kQ4_KPacked8Bytes;
        const int8_t* xs[TT];
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) xs[t] = x->values + size_t(t0 + t) * w.cols + size_t(i) * kSuperBlock;
        __m256i sum[BT][TT];
        ANVIL_UNROLL
        for (int b = 0; b < BT; ++b)
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) sum[b][t] = _mm256_setzero_si256();
        ANVIL_UNROLL
        for (int c = 0; c < 4; ++c) {
            __m256i lo_sum[BT][TT], hi_sum[BT][TT];
            ANVIL_UNROLL
            for (int b = 0; b < BT; ++b)
                ANVIL_UNROLL
                for (int t = 0; t < TT; ++t) lo_sum[b][t] = hi_sum[b][t] = _mm256_setzero_si256();
            ANVIL_UNROLL
            for (int s = 0; s < 8; ++s) {
                __m256i xa[TT], xb[TT];
                ANVIL_UNROLL
                for (int t = 0; t < TT; ++t) {
                    int32_t four_a, four_b;
                    std::memcpy(&four_a, xs[t] + 64 * c + 4 * s, 4);
                    std::memcpy(&four_b, xs[t] + 64 * c + 32 + 4 * s, 4);
                    xa[t] = _mm256_set1_epi32(four_a);
                    xb[t] = _mm256_set1_epi32(four_b);
                }
                ANVIL_UNROLL
                for (int b = 0; b < BT; ++b) {
                    const uint8_t* at = tiles[b] + 160 + size_t(c * 8 + s) * 32;
                    if (s % 2 == 0) {
                        _mm_prefetch(reinterpret_cast<const char*>(at) + kPrefetchAhead, _MM_HINT_T0);
                        _mm_prefetch(reinterpret_cast<const char*>(at) + kPrefetchFar, _MM_HINT_T1);
                    }
                    const __m256i v = load256(at);
                    const __m256i lo = _mm256_and_si256(v, low4);
                    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
                    ANVIL_UNROLL
                    for (int t = 0; t < TT; ++t) {
                        lo_sum[b][t] = _mm256_add_epi16(lo_sum[b][t], _mm256_maddubs_epi16(lo, xa[t]));
                        hi_sum[b][t] = _mm256_add_epi16(hi_sum[b][t], _mm256_maddubs_epi16(hi, xb[t]));
                        // Each sum one chain in one register: GCC otherwise regroups the int16 adds
                        // into trees whose partial sums spill (16 registers); 1.04-1.08x decode and
                        // 1.06x for 64 tokens, one thread in L2 (docs/PERFORMANCE.md, "Decode tiles").
                        asm("" : "+x"(lo_sum[b][t]), "+x"(hi_sum[b][t]));
                    }
                }
            }
            ANVIL_UNROLL
            for (int b = 0; b < BT; ++b) {
                const __m256i scale_lo = _mm256_cvtepu8_epi16(
                    _mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(tiles[b] + 32 + 16 * c)), twice));
                const __m256i scale_hi = _mm256_cvtepu8_epi16(
                    _mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(tiles[b] + 40 + 16 * c)), twice));
                ANVIL_UNROLL
                for (int t = 0; t < TT; ++t)
                    sum[b][t] = _mm256_add_epi32(sum[b][t], _mm256_add_epi32(_mm256_madd_epi16(lo_sum[b][t], scale_lo),
                                                                             _mm256_madd_epi16(hi_sum[b][t], scale_hi)));
            }
        }
        ANVIL_UNROLL
        for (int b = 0; b < BT; ++b) {
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tiles[b])));
            const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tiles[b] + 16)));
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) {
                const int16_t* sums = x->sums32 + (size_t(t0 + t) * supers + size_t(i)) * 8;
                __m256i offsets = _mm256_setzero_si256();
                ANVIL_UNROLL
                for (int p = 0; p < 4; ++p) {
                    int32_t pair;
                    std::memcpy(&pair, sums + 2 * p, 4);
                    const __m256i mins = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tiles[b] + 96 + 16 * p)));
                    offsets = _mm256_add_epi32(offsets, _mm256_madd_epi16(mins, _mm256_set1_epi32(pair)));
                }
                const __m256 x_scale = _mm256_set1_ps(x->scales[size_t(t0 + t) * supers + i]);
                acc[b][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[b][t]), _mm256_mul_ps(d, x_scale), acc[b][t]);
                acc[b][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(offsets), _mm256_mul_ps(dmin, x_scale), acc[b][t]);
            }
        }
    }
    ANVIL_UNROLL
    for (int b = 0; b < BT; ++b)
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) store_rows8(acc[b][t], w.rows, (b0 + b) * kPack8Rows, t0 + t, y);
}


// Q6_K packed by 8 rows for these products (Q6_KPacked8Avx2, ggml_blocks.hpp): one 8-row block
// from b0 times TT tokens from t0, the activations reordered to the layout's pairs of sub-blocks
// (pair_activations). A group's three 32-byte loads unpack into four registers of 4 values of 8 rows,
// each row's int16 lanes one sub-block (even) and the next (odd); two registers add up in int16 (at
// most 2 x 2 x 63 x 127 = 32004) before one vpmaddwd by the pair's scale bytes as they lie, which
// also take the activations' sums for the stored values' offset of 32.
template <int TT>
void q6_k_packed8_tile(const WeightMatrix& w, int b0, const SuperBlockInput* x, int t0, float* y) {
    const int supers = w.cols / kSuperBlock;
    const uint8_t* block = static_cast<const uint8_t*>(w.data) + size_t(b0) * size_t(supers) * kQ6_KPacked8Bytes;
    __m256 acc[TT];
    ANVIL_UNROLL
    for (int t = 0; t < TT; ++t) acc[t] = _mm256_setzero_ps();
    const __m256i low6 = _mm256_set1_epi8(0x3f);

    for (int i = 0; i < supers; ++i) {
        const uint8_t* tile = block + size_t(i) * kQ6_KPacked8Bytes;
        const int8_t* xs[TT];
        __m256i sum[TT], offset[TT];
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) {
            xs[t] = x->values + size_t(t0 + t) * w.cols + size_t(i) * kSuperBlock;
            sum[t] = offset[t] = _mm256_setzero_si256();
        }
        ANVIL_UNROLL
        for (int p = 0; p < 8; ++p) {
            const __m256i scales = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + 16 + 16 * p)));
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) {
                int32_t pair;
                std::memcpy(&pair, x->sums + (size_t(t0 + t) * supers + size_t(i)) * 16 + 2 * p, 4);
                offset[t] = _mm256_add_epi32(offset[t], _mm256_madd_epi16(scales, _mm256_set1_epi32(pair)));
            }
            ANVIL_UNROLL
            for (int g = 2 * p; g < 2 * p + 2; ++g) {
                const uint8_t* at = tile + 144 + size_t(g) * 96;
                _mm_prefetch(reinterpret_cast<const char*>(at) + kPrefetchAheadDeep, _MM_HINT_T0);
                _mm_prefetch(reinterpret_cast<const char*>(at) + kPrefetchAheadDeep + 64, _MM_HINT_T0);
                // And into L2 further ahead where a tile's few tokens leave it waiting on memory:
                // from L3 1.14-1.20x at 1 and 2 threads, 2 tokens 1.12x, on the Intel VM without
                // BF16 (kernel_ab; docs/PERFORMANCE.md, "Prefetch distances"), where this tile read
                // 8-9 GB/s a thread against Q4_K's 10. AVX2's Q4_K and the VNNI level's one-token
                // tiles gained nothing from it.
                if constexpr (TT < 4) {
                    _mm_prefetch(reinterpret_cast<const char*>(at) + kPrefetchFarDeep, _MM_HINT_T1);
                    _mm_prefetch(reinterpret_cast<const char*>(at) + kPrefetchFarDeep + 64, _MM_HINT_T1);
                }
                const __m256i r0 = load256(at), r1 = load256(at + 32), r2 = load256(at + 64);
                const __m256i v0 = _mm256_and_si256(r0, low6), v1 = _mm256_and_si256(r1, low6), v2 = _mm256_and_si256(r2, low6);
                // The fourth register's bits 0-1, 2-3 and 4-5 from the top of the three: each run's
                // top bits alone (x ^ its low six), shifted down in 16-bit lanes, which moves no bit
                // across a byte since only bits 6-7 of each byte are left.
                const __m256i v3 = _mm256_or_si256(
                    _mm256_or_si256(_mm256_srli_epi16(_mm256_xor_si256(r0, v0), 6), _mm256_srli_epi16(_mm256_xor_si256(r1, v1), 4)),
                    _mm256_srli_epi16(_mm256_xor_si256(r2, v2), 2));
                ANVIL_UNROLL
                for (int t = 0; t < TT; ++t) {
                    int32_t four[4];
                    std::memcpy(four, xs[t] + 32 * p + 16 * (g % 2), 16);
                    const __m256i a = _mm256_add_epi16(_mm256_maddubs_epi16(v0, _mm256_set1_epi32(four[0])),
                                                       _mm256_maddubs_epi16(v1, _mm256_set1_epi32(four[1])));
                    const __m256i b = _mm256_add_epi16(_mm256_maddubs_epi16(v2, _mm256_set1_epi32(four[2])),
                                                       _mm256_maddubs_epi16(v3, _mm256_set1_epi32(four[3])));
                    sum[t] = _mm256_add_epi32(sum[t], _mm256_add_epi32(_mm256_madd_epi16(a, scales), _mm256_madd_epi16(b, scales)));
                    // One chain in one register, as in the Q4_K tile: GCC otherwise gathers a
                    // super-block's 16 products on the stack and adds them as a tree. With the
                    // L2 prefetch above only for fewer than 4 tokens, 64 tokens from L3 1.14x against
                    // the tile with neither (the prefetch alone cost multi-token tiles 2-3%;
                    // docs/PERFORMANCE.md, "Tiles of several tokens").
                    asm("" : "+x"(sum[t]));
                }
            }
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile)));
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) {
            // The stored values are q + 32: take 32 x each sub-block's scale x its activations' sum.
            const __m256i dot = _mm256_sub_epi32(sum[t], _mm256_slli_epi32(offset[t], 5));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, _mm256_set1_ps(x->scales[size_t(t0 + t) * supers + i])),
                                     acc[t]);
        }
    }
    ANVIL_UNROLL
    for (int t = 0; t < TT; ++t) store_rows8(acc[t], w.rows, b0 * kPack8Rows, t0 + t, y);
}

// The activations in Q6_KPacked8Avx2's order: within each 32 (a pair of sub-blocks), two values of
// the first sub-block, then the same two of the second, and so on (the 16-bit interleave of the
// pair's halves), so that a register's four bytes of a row meet theirs in one broadcast dword.
void pair_activations(const int8_t* in, size_t n, int8_t* out) {
    for (size_t k = 0; k < n; k += 32) {
        const __m128i first = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + k));
        const __m128i second = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + k + 16));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k), _mm_unpacklo_epi16(first, second));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k + 16), _mm_unpackhi_epi16(first, second));
    }
}

// Q4_0 packed by 8 rows: one 8-row block from b0 times TT tokens from t0. A block of 32 values is
// 4 steps of 32 bytes, each 4 values of 8 rows in its low nibbles and 4 in its high ones; its 8
// products add up in int16 (at most 8 x 2 x 15 x 127 = 30480), the stored values' offset of 8
// comes off as 8 x the activations' sum.
template <int TT>
void q4_0_packed8_tile(const WeightMatrix& w, int b0, const QuantizedInput* x, int t0, float* y) {
    const int per_row = w.cols / kQ4_0Values;
    const uint8_t* block = static_cast<const uint8_t*>(w.data) + size_t(b0) * size_t(per_row) * kQ4_0Packed8Bytes;
    __m256 acc[TT];
    ANVIL_UNROLL
    for (int t = 0; t < TT; ++t) acc[t] = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int i = 0; i < per_row; ++i) {
        const uint8_t* tile = block + size_t(i) * kQ4_0Packed8Bytes;
        _mm_prefetch(reinterpret_cast<const char*>(tile) + kPrefetchAhead, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(tile) + kPrefetchFar, _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(tile) + kPrefetchAhead + 64, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(tile) + kPrefetchFar + 64, _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(tile) + kPrefetchAhead + 128, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(tile) + kPrefetchFar + 128, _MM_HINT_T1);
        __m256i sum[TT];
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) sum[t] = _mm256_setzero_si256();
        ANVIL_UNROLL
        for (int s = 0; s < 4; ++s) {
            __m256i v = load256(tile + 16 + 32 * s);
            // One load a step: GCC otherwise loads it again as the low nibbles' vpand operand
            // (docs/PERFORMANCE.md, "Decode tiles").
            asm("" : "+x"(v));
            const __m256i lo = _mm256_and_si256(v, low4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) {
                const int8_t* xv = x->values + size_t(t0 + t) * w.cols + size_t(i) * kQ4_0Values;
                int32_t four_lo, four_hi;
                std::memcpy(&four_lo, xv + 4 * s, 4);
                std::memcpy(&four_hi, xv + 16 + 4 * s, 4);
                sum[t] = _mm256_add_epi16(sum[t], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(four_lo)));
                sum[t] = _mm256_add_epi16(sum[t], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(four_hi)));
            }
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile)));
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) {
            const size_t g = size_t(t0 + t) * per_row + size_t(i);
            const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(sum[t], ones), _mm256_set1_epi32(x->less_8_sums[g]));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, _mm256_set1_ps(x->scales[g])), acc[t]);
        }
    }
    ANVIL_UNROLL
    for (int t = 0; t < TT; ++t) store_rows8(acc[t], w.rows, b0 * kPack8Rows, t0 + t, y);
}

}  // namespace

void matmul_avx2_blocks(const WeightMatrix* ws, float* const* ys, int count, const QuantizedInput* q32,
                        const SuperBlockInput* q256, int n_tokens) {
    if (ws[0].type == WeightType::Q4_0Packed8)
        return run_items(ws, ys, count, n_tokens, packed8_items, [q32](const WeightMatrix& w, int item, int c0, int c1, float* y) {
            packed8_item<QuantizedInput, 2, q4_0_packed8_tile<2>, q4_0_packed8_tile<1>>(w, item, q32, c0, c1, y);
        });
    // Q4_K and Q6_K, alone or together in one step (a Q4_K_M model's q, k and v): each item by its
    // matrix's kernel, Q6_K's on the activations in its layout's order. Each thread of a team
    // reorders its own copy, as it rounded its own activations.
    SuperBlockInput paired_input{};
    if (std::any_of(ws, ws + count, [](const WeightMatrix& w) { return w.type == WeightType::Q6_KPacked8Avx2; })) {
        thread_local std::vector<int8_t> paired;
        const size_t n = size_t(n_tokens) * size_t(ws[0].cols);
        if (paired.size() < n) paired.resize(n);
        pair_activations(q256->values, n, paired.data());
        paired_input = {paired.data(), q256->scales, q256->sums, q256->sums32};
    }
    run_items(ws, ys, count, n_tokens, packed8_items, [q256, &paired_input](const WeightMatrix& w, int item, int c0, int c1, float* y) {
        if (w.type == WeightType::Q6_KPacked8Avx2)
            // Four tokens a tile despite the spills (16 registers): 512-token products 1.13-1.14x
            // (docs/PERFORMANCE.md, "Tiles of several tokens").
            packed8_item_four_two<SuperBlockInput, q6_k_packed8_tile<4>, q6_k_packed8_tile<2>, q6_k_packed8_tile<1>,
                                  each_of_pair<SuperBlockInput, q6_k_packed8_tile<1>>>(w, item, &paired_input, c0, c1, y);
        else packed8_item<SuperBlockInput, 2, q4_k_packed8_tile<1, 2>, q4_k_packed8_tile<1, 1>>(w, item, q256, c0, c1, y);
    });
}

}  // namespace anvil::kernels::detail
