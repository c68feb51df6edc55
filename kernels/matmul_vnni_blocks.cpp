// GGUF's block formats (Q4_0, Q4_K, Q6_K) times int8 activations with AVX-512 VNNI on 256-bit
// registers: the same 8-row packed blocks and the same rounded activations as
// matmul_avx2_blocks.cpp, whose comments say how the layouts are walked. vpdpbusd multiplies
// unsigned weight bytes by signed activation bytes and adds each four products to an int32 lane
// in one instruction, where AVX2 needs vpmaddubsw, an int16 add and, per sub-block, a vpmaddwd:
// the sums stay int32 from the start and take the rows' scales with vpmulld; four tokens a tile
// (AVX-512's 32 registers; Q6_K's partial sums spill at four, and it gains all the same:
// packed8_item_four_two). The tiles of several tokens are 256 bits, because the packed layout's 8
// lanes are 8 rows; a lone token's (decode) takes two steps a 512-bit register, the halves added at
// the end (the *_token512 tiles).
// Integer sums are exact either way, so every level gives the same products bit for bit up to the
// float accumulation order, which is also the same.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/ggml_blocks.hpp"
#include "kernels/matmul.hpp"
#include "kernels/matmul_blocks_common.hpp"
#include "kernels/matmul_tiling.hpp"

// The accumulators must live in registers (see matmul_avx2.cpp).
#define ANVIL_UNROLL _Pragma("GCC unroll 16")

namespace anvil::kernels::detail {
namespace {

inline __m256i broadcast4(const int8_t* p) {
    int32_t four;
    std::memcpy(&four, p, 4);
    return _mm256_set1_epi32(four);
}
// 8 unsigned bytes from p as 8 int32 lanes.
inline __m256i widen_u8(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }

// For a tile's 8 rows, the sum over Pairs pairs of sub-blocks of each sub-block's per-row byte
// (16 bytes a pair, two per row; signed or not) times its activations' sum (two int16 a pair).
template <int Pairs, bool Signed>
inline __m256i sub_block_products(const uint8_t* bytes, const int16_t* sums) {
    __m256i total = _mm256_setzero_si256();
    ANVIL_UNROLL
    for (int p = 0; p < Pairs; ++p) {
        int32_t pair;
        std::memcpy(&pair, sums + 2 * p, 4);
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + 16 * p));
        const __m256i wide = Signed ? _mm256_cvtepi8_epi16(raw) : _mm256_cvtepu8_epi16(raw);
        total = _mm256_dpwssd_epi32(total, wide, _mm256_set1_epi32(pair));
    }
    return total;
}
// Q4_K: the mins (u8, at byte 96) times the 32-value sums.
inline __m256i q4_k_min_offsets(const uint8_t* tile, const int16_t* sums32) { return sub_block_products<4, false>(tile + 96, sums32); }
// Q6_K: its values are stored as q + 32, so a tile's sums start at -32 x the scales (i8, at byte
// 16) times the 16-value sums.
inline __m256i q6_k_start_sums(const uint8_t* tile, const int16_t* sums) {
    return _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sub_block_products<8, true>(tile + 16, sums), 5));
}

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
            // Sub-blocks 2c (low nibbles) and 2c + 1 (high), at most 32 x 15 x 127 a lane.
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
                    xa[t] = broadcast4(xs[t] + 64 * c + 4 * s);
                    xb[t] = broadcast4(xs[t] + 64 * c + 32 + 4 * s);
                }
                ANVIL_UNROLL
                for (int b = 0; b < BT; ++b) {
                    const uint8_t* at = tiles[b] + 160 + size_t(c * 8 + s) * 32;
                    if (s % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(at) + kPrefetchAheadDeep, _MM_HINT_T0);
                    const __m256i v = load256(at);
                    const __m256i lo = _mm256_and_si256(v, low4);
                    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
                    ANVIL_UNROLL
                    for (int t = 0; t < TT; ++t) {
                        lo_sum[b][t] = _mm256_dpbusd_epi32(lo_sum[b][t], lo, xa[t]);
                        hi_sum[b][t] = _mm256_dpbusd_epi32(hi_sum[b][t], hi, xb[t]);
                    }
                }
            }
            ANVIL_UNROLL
            for (int b = 0; b < BT; ++b) {
                const __m256i scale_lo = widen_u8(tiles[b] + 32 + 16 * c);
                const __m256i scale_hi = widen_u8(tiles[b] + 40 + 16 * c);
                ANVIL_UNROLL
                for (int t = 0; t < TT; ++t)
                    sum[b][t] = _mm256_add_epi32(sum[b][t], _mm256_add_epi32(_mm256_mullo_epi32(lo_sum[b][t], scale_lo),
                                                                             _mm256_mullo_epi32(hi_sum[b][t], scale_hi)));
            }
        }
        ANVIL_UNROLL
        for (int b = 0; b < BT; ++b) {
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tiles[b])));
            const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tiles[b] + 16)));
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) {
                const __m256i offsets = q4_k_min_offsets(tiles[b], x->sums32 + (size_t(t0 + t) * supers + size_t(i)) * 8);
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

// The pair tiles' operands: the same bytes of an item's two blocks side by side, 16 bytes (lanes
// of the first block, then the second's) or 32.
inline __m256i side_by_side128(const uint8_t* a, const uint8_t* b) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
                                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
}
inline __m512i side_by_side256(const uint8_t* a, const uint8_t* b) { return _mm512_inserti64x4(_mm512_castsi256_si512(load256(a)), load256(b), 1); }
// A pair tile's sums of one token: the first block's 8 rows in the low half, the second's above.
inline void store_pair_rows(__m512 sums, int rows, int b0, int t, float* y) {
    store_rows8(_mm512_castps512_ps256(sums), rows, b0 * kPack8Rows, t, y);
    store_rows8(_mm512_extractf32x8_ps(sums, 1), rows, (b0 + 1) * kPack8Rows, t, y);
}

// Q4_K for TT tokens over a pair of 8-row blocks, 512 bits a step, as q4_0_pair512_tile: the two
// blocks' 32 bytes of a step side by side, unpacked once for the tile's tokens, each token's four
// activations a broadcast against them; the sub-blocks' scales (vpmulld, two uops) and the mins'
// products then serve 16 rows an instruction too. The same int32 sums as q4_k_packed8_tile, and
// its float steps lane for lane: the same bits.
template <int TT>
void q4_k_pair512_tile(const WeightMatrix& w, int b0, const SuperBlockInput* x, int t0, float* y) {
    const int supers = w.cols / kSuperBlock;
    const size_t block_bytes = size_t(supers) * kQ4_KPacked8Bytes;
    const uint8_t* block = static_cast<const uint8_t*>(w.data) + size_t(b0) * block_bytes;
    __m512 acc[TT];
    ANVIL_UNROLL
    for (int t = 0; t < TT; ++t) acc[t] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (int i = 0; i < supers; ++i) {
        const uint8_t* tiles[2] = {block + size_t(i) * kQ4_KPacked8Bytes, block + block_bytes + size_t(i) * kQ4_KPacked8Bytes};
        __m512i sum[TT];
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) sum[t] = _mm512_setzero_si512();
        ANVIL_UNROLL
        for (int c = 0; c < 4; ++c) {
            __m512i lo_sum[TT], hi_sum[TT];
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) lo_sum[t] = hi_sum[t] = _mm512_setzero_si512();
            ANVIL_UNROLL
            for (int s = 0; s < 8; ++s) {
                const size_t step = 160 + size_t(c * 8 + s) * 32;
                if (s % 2 == 0)
                    ANVIL_UNROLL
                    for (int b = 0; b < 2; ++b) _mm_prefetch(reinterpret_cast<const char*>(tiles[b] + step) + kPrefetchAheadDeep, _MM_HINT_T0);
                const __m512i v = side_by_side256(tiles[0] + step, tiles[1] + step);
                const __m512i lo = _mm512_and_si512(v, low4);
                const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
                ANVIL_UNROLL
                for (int t = 0; t < TT; ++t) {
                    const int8_t* xs = x->values + size_t(t0 + t) * w.cols + size_t(i) * kSuperBlock + 64 * c + 4 * s;
                    int32_t four[2];
                    std::memcpy(&four[0], xs, 4);
                    std::memcpy(&four[1], xs + 32, 4);
                    lo_sum[t] = _mm512_dpbusd_epi32(lo_sum[t], lo, _mm512_set1_epi32(four[0]));
                    hi_sum[t] = _mm512_dpbusd_epi32(hi_sum[t], hi, _mm512_set1_epi32(four[1]));
                }
            }
            const __m512i scale_lo = _mm512_cvtepu8_epi32(
                _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(tiles[0] + 32 + 16 * c)),
                                   _mm_loadl_epi64(reinterpret_cast<const __m128i*>(tiles[1] + 32 + 16 * c))));
            const __m512i scale_hi = _mm512_cvtepu8_epi32(
                _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(tiles[0] + 40 + 16 * c)),
                                   _mm_loadl_epi64(reinterpret_cast<const __m128i*>(tiles[1] + 40 + 16 * c))));
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t)
                sum[t] = _mm512_add_epi32(sum[t], _mm512_add_epi32(_mm512_mullo_epi32(lo_sum[t], scale_lo), _mm512_mullo_epi32(hi_sum[t], scale_hi)));
        }
        const __m512 d = _mm512_cvtph_ps(side_by_side128(tiles[0], tiles[1]));
        const __m512 dmin = _mm512_cvtph_ps(side_by_side128(tiles[0] + 16, tiles[1] + 16));
        // The mins (u8, at byte 96) as q4_k_min_offsets takes them, both blocks' at once.
        __m512i mins[4];
        ANVIL_UNROLL
        for (int p = 0; p < 4; ++p) mins[p] = _mm512_cvtepu8_epi16(side_by_side128(tiles[0] + 96 + 16 * p, tiles[1] + 96 + 16 * p));
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) {
            const int16_t* sums32 = x->sums32 + (size_t(t0 + t) * supers + size_t(i)) * 8;
            __m512i offsets = _mm512_setzero_si512();
            ANVIL_UNROLL
            for (int p = 0; p < 4; ++p) {
                int32_t pair;
                std::memcpy(&pair, sums32 + 2 * p, 4);
                offsets = _mm512_dpwssd_epi32(offsets, mins[p], _mm512_set1_epi32(pair));
            }
            const __m512 x_scale = _mm512_set1_ps(x->scales[size_t(t0 + t) * supers + i]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[t]), _mm512_mul_ps(d, x_scale), acc[t]);
            acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(offsets), _mm512_mul_ps(dmin, x_scale), acc[t]);
        }
    }
    ANVIL_UNROLL
    for (int t = 0; t < TT; ++t) store_pair_rows(acc[t], w.rows, b0, t0 + t, y);
}

// One token's activations for two consecutive steps as 512 bits: the step's 4 bytes in lanes 0-7
// (the 8 rows of the first step's 32 weight bytes), the next step's in lanes 8-15.
inline __m512i two_steps(const int8_t* p) {
    const __m512i order = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    return _mm512_permutexvar_epi32(order, _mm512_castsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256i halves_added(__m512i v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }
// Two sums' halves added as one register: [a's low + a's high, b's low + b's high] (each sum's halves
// are its even and odd steps), so one vpmulld can scale both.
inline __m512i pair_halves_added(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, 0x44), _mm512_shuffle_i64x2(a, b, 0xee));
}

// Where a one-token tile of an item's two blocks asks for the bytes `ahead` of `at`, `offset` bytes
// into its block b: the two blocks are read side by side, so the first block's look-ahead past its
// end would land in the second, being read already; it goes two blocks on instead, to the next
// item's second block, which would otherwise start cold (one thread, 4096 x 4096 from L3: 0.93-0.98x
// of the one-block tiles without this). The second block's runs on into the next item's first.
inline const char* ahead_of(const uint8_t* at, size_t offset, size_t block_bytes, int b, int blocks, int ahead) {
    const bool past_first = blocks == 2 && b == 0 && offset + size_t(ahead) >= block_bytes;
    return reinterpret_cast<const char*>(at) + ahead + (past_first ? 2 * block_bytes : 0);
}

// Q4_K for one token with two steps a 512-bit register: half the instructions a weight byte of the
// 256-bit tile, which matters where a core multiplies 512 bits at once (Zen 5: one thread of the
// 256-bit tile computed ~37 GB/s of weights, no faster than one thread can read memory). A
// sub-block pair's two sums fold into one register, [low nibbles' 8 rows, high nibbles' 8 rows],
// which the pair's 16 scale bytes multiply as they lie: one vpmulld a pair, where each sum's own
// reduction and multiply took twice the instructions (in L2, one thread: 5% faster). Blocks (1 or
// 2) 8-row blocks at once, as q4_0_packed8_token512: the activations' permutes serve both. The high
// nibbles are multiplied in place (the byte & 0xf0, 16 x the nibble) and their sum shifted down
// once a pair of sub-blocks, one instruction where the nibbles' shift took four. The same int32
// sums as the 256-bit tile in another order, exact, so the same results bit for bit.
template <int Blocks>
void q4_k_packed8_token512(const WeightMatrix& w, int b0, const SuperBlockInput* x, int t0, float* y) {
    static_assert(Blocks == 1 || Blocks == 2);
    const int supers = w.cols / kSuperBlock;
    const size_t block_bytes = size_t(supers) * kQ4_KPacked8Bytes;
    const uint8_t* block = static_cast<const uint8_t*>(w.data) + size_t(b0) * block_bytes;
    __m256 acc[Blocks];
    ANVIL_UNROLL
    for (int b = 0; b < Blocks; ++b) acc[b] = _mm256_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0f), high4 = _mm512_set1_epi8(int8_t(0xf0));
    for (int i = 0; i < supers; ++i) {
        const uint8_t* tiles[Blocks];
        ANVIL_UNROLL
        for (int b = 0; b < Blocks; ++b) tiles[b] = block + size_t(b) * block_bytes + size_t(i) * kQ4_KPacked8Bytes;
        const int8_t* xs = x->values + size_t(t0) * w.cols + size_t(i) * kSuperBlock;
        __m512i sum[Blocks];
        ANVIL_UNROLL
        for (int b = 0; b < Blocks; ++b) sum[b] = _mm512_setzero_si512();
        ANVIL_UNROLL
        for (int c = 0; c < 4; ++c) {
            __m512i lo_sum[Blocks], hi_sum[Blocks];
            ANVIL_UNROLL
            for (int b = 0; b < Blocks; ++b) lo_sum[b] = hi_sum[b] = _mm512_setzero_si512();
            ANVIL_UNROLL
            for (int s = 0; s < 8; s += 2) {
                const __m512i xa = two_steps(xs + 64 * c + 4 * s), xb = two_steps(xs + 64 * c + 32 + 4 * s);
                ANVIL_UNROLL
                for (int b = 0; b < Blocks; ++b) {
                    const size_t offset = size_t(i) * kQ4_KPacked8Bytes + 160 + size_t(c * 8 + s) * 32;
                    const uint8_t* at = tiles[b] + 160 + size_t(c * 8 + s) * 32;
                    _mm_prefetch(ahead_of(at, offset, block_bytes, b, Blocks, kPrefetchAheadDeep), _MM_HINT_T0);
                    const __m512i v = _mm512_loadu_si512(at);
                    lo_sum[b] = _mm512_dpbusd_epi32(lo_sum[b], _mm512_and_si512(v, low4), xa);
                    hi_sum[b] = _mm512_dpbusd_epi32(hi_sum[b], _mm512_and_si512(v, high4), xb);
                }
            }
            ANVIL_UNROLL
            for (int b = 0; b < Blocks; ++b) {
                // Each high sum is 16 x an integer (at most 16 x 4 x 4 x 15 x 128 a lane): exact.
                const __m512i pair = pair_halves_added(lo_sum[b], _mm512_srai_epi32(hi_sum[b], 4));
                const __m512i scales = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tiles[b] + 32 + 16 * c)));
                sum[b] = _mm512_add_epi32(sum[b], _mm512_mullo_epi32(pair, scales));
            }
        }
        const __m256 x_scale = _mm256_set1_ps(x->scales[size_t(t0) * supers + i]);
        ANVIL_UNROLL
        for (int b = 0; b < Blocks; ++b) {
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tiles[b])));
            const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tiles[b] + 16)));
            const __m256i offsets = q4_k_min_offsets(tiles[b], x->sums32 + (size_t(t0) * supers + size_t(i)) * 8);
            acc[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(halves_added(sum[b])), _mm256_mul_ps(d, x_scale), acc[b]);
            acc[b] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(offsets), _mm256_mul_ps(dmin, x_scale), acc[b]);
        }
    }
    ANVIL_UNROLL
    for (int b = 0; b < Blocks; ++b) store_rows8(acc[b], w.rows, (b0 + b) * kPack8Rows, t0, y);
}

// Q6_K: a sub-block's 16 values are four steps of one quarter; they add up in int32 before its
// scale (int8, widened to int32) multiplies them.
template <int TT>
void q6_k_packed8_tile(const WeightMatrix& w, int b0, const SuperBlockInput* x, int t0, float* y) {
    const int supers = w.cols / kSuperBlock;
    const uint8_t* block = static_cast<const uint8_t*>(w.data) + size_t(b0) * size_t(supers) * kQ6_KPacked8Bytes;
    __m256 acc[TT];
    ANVIL_UNROLL
    for (int t = 0; t < TT; ++t) acc[t] = _mm256_setzero_ps();
    // A sub-block's scale byte of each row, the even or odd one of the row's pair, to the low 8 bytes.
    const __m128i even = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i odd = _mm_setr_epi8(1, 3, 5, 7, 9, 11, 13, 15, -1, -1, -1, -1, -1, -1, -1, -1);

    for (int i = 0; i < supers; ++i) {
        const uint8_t* tile = block + size_t(i) * kQ6_KPacked8Bytes;
        const int8_t* xs[TT];
        __m256i sum[TT];
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) {
            xs[t] = x->values + size_t(t0 + t) * w.cols + size_t(i) * kSuperBlock;
            sum[t] = q6_k_start_sums(tile, x->sums + (size_t(t0 + t) * supers + size_t(i)) * 16);
        }
        ANVIL_UNROLL
        for (int h = 0; h < 2; ++h)
            ANVIL_UNROLL
            for (int s4 = 0; s4 < 2; ++s4) {  // four steps at a time: one sub-block of each quarter
                __m256i part[4][TT];
                ANVIL_UNROLL
                for (int k = 0; k < 4; ++k)
                    ANVIL_UNROLL
                    for (int t = 0; t < TT; ++t) part[k][t] = _mm256_setzero_si256();
                ANVIL_UNROLL
                for (int s = 4 * s4; s < 4 * s4 + 4; ++s) {
                    const uint8_t* at = tile + 144 + size_t(h * 8 + s) * 96;
                    _mm_prefetch(reinterpret_cast<const char*>(at) + kPrefetchAheadDeep, _MM_HINT_T0);
                    _mm_prefetch(reinterpret_cast<const char*>(at) + kPrefetchAheadDeep + 64, _MM_HINT_T0);
                    __m256i q[4];
                    q6_k_step_values(at, q);
                    ANVIL_UNROLL
                    for (int k = 0; k < 4; ++k)
                        ANVIL_UNROLL
                        for (int t = 0; t < TT; ++t)
                            part[k][t] = _mm256_dpbusd_epi32(part[k][t], q[k], broadcast4(xs[t] + 128 * h + 32 * k + 4 * s));
                }
                ANVIL_UNROLL
                for (int k = 0; k < 4; ++k) {
                    const int j = 8 * h + 2 * k + s4;  // the sub-block of these steps in quarter k
                    const __m128i pair = _mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + 16 + 16 * (j / 2)));
                    const __m256i scale = _mm256_cvtepi8_epi32(_mm_shuffle_epi8(pair, j % 2 ? odd : even));
                    ANVIL_UNROLL
                    for (int t = 0; t < TT; ++t) {
                        sum[t] = _mm256_add_epi32(sum[t], _mm256_mullo_epi32(part[k][t], scale));
                        // One chain in one register: GCC otherwise keeps the products on the stack
                        // and adds them as a tree (220 stack references in the 4-token tile, 72
                        // with this). Prefill of 64 tokens 1.12-1.18x, 2 and 5 tokens 1.05x, outputs
                        // identical (kernel_ab; docs/PERFORMANCE.md, "Tiles of several tokens").
                        // The Q4_K tile's sums gained nothing.
                        asm("" : "+v"(sum[t]));
                    }
                }
            }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile)));
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t)
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[t]), _mm256_mul_ps(d, _mm256_set1_ps(x->scales[size_t(t0 + t) * supers + i])),
                                     acc[t]);
    }
    ANVIL_UNROLL
    for (int t = 0; t < TT; ++t) store_rows8(acc[t], w.rows, b0 * kPack8Rows, t0 + t, y);
}

// q6_k_step_values for a pair of blocks' steps side by side: lanes 0-7 the first block's rows,
// 8-15 the second's.
inline void q6_k_pair_step_values(const uint8_t* at0, const uint8_t* at1, __m512i q[4]) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const __m512i bits45 = _mm512_set1_epi8(0x30);
    const __m512i a = side_by_side256(at0, at1), b = side_by_side256(at0 + 32, at1 + 32), hb = side_by_side256(at0 + 64, at1 + 64);
    q[0] = _mm512_or_si512(_mm512_and_si512(a, low4), _mm512_and_si512(_mm512_slli_epi16(hb, 4), bits45));
    q[1] = _mm512_or_si512(_mm512_and_si512(b, low4), _mm512_and_si512(_mm512_slli_epi16(hb, 2), bits45));
    q[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 4), low4), _mm512_and_si512(hb, bits45));
    q[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(b, 4), low4), _mm512_and_si512(_mm512_srli_epi16(hb, 2), bits45));
}

// Q6_K for TT tokens over a pair of 8-row blocks, 512 bits a step, as q4_0_pair512_tile: the
// unpacking, the scales' multiplies and the start sums serve 16 rows an instruction. The same
// int32 sums as q6_k_packed8_tile and its float steps lane for lane: the same bits.
template <int TT>
void q6_k_pair512_tile(const WeightMatrix& w, int b0, const SuperBlockInput* x, int t0, float* y) {
    const int supers = w.cols / kSuperBlock;
    const size_t block_bytes = size_t(supers) * kQ6_KPacked8Bytes;
    const uint8_t* block = static_cast<const uint8_t*>(w.data) + size_t(b0) * block_bytes;
    __m512 acc[TT];
    ANVIL_UNROLL
    for (int t = 0; t < TT; ++t) acc[t] = _mm512_setzero_ps();
    const __m128i even = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i odd = _mm_setr_epi8(1, 3, 5, 7, 9, 11, 13, 15, -1, -1, -1, -1, -1, -1, -1, -1);
    const auto load128 = [](const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); };
    for (int i = 0; i < supers; ++i) {
        const uint8_t* tiles[2] = {block + size_t(i) * kQ6_KPacked8Bytes, block + block_bytes + size_t(i) * kQ6_KPacked8Bytes};
        const int8_t* xs[TT];
        __m512i sum[TT];
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) {
            xs[t] = x->values + size_t(t0 + t) * w.cols + size_t(i) * kSuperBlock;
            sum[t] = _mm512_setzero_si512();
        }
        // The start sums as q6_k_start_sums takes them, both blocks' scales widened once for the
        // tile's tokens.
        ANVIL_UNROLL
        for (int p = 0; p < 8; ++p) {
            const __m512i scales = _mm512_cvtepi8_epi16(side_by_side128(tiles[0] + 16 + 16 * p, tiles[1] + 16 + 16 * p));
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) {
                int32_t pair;
                std::memcpy(&pair, x->sums + (size_t(t0 + t) * supers + size_t(i)) * 16 + 2 * p, 4);
                sum[t] = _mm512_dpwssd_epi32(sum[t], scales, _mm512_set1_epi32(pair));
            }
        }
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) sum[t] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum[t], 5));
        // Quarters k2 and k2 + 1 of four steps (a sub-block of each) at a time: the partial sums of
        // all four quarters, 4 x TT registers, left too few for six tokens, and a step's loads
        // twice cost less than the spills (six tokens a tile 1.30-1.35x over four, all quarters
        // at once 1.17-1.25x).
        ANVIL_UNROLL
        for (int h = 0; h < 2; ++h)
            ANVIL_UNROLL
            for (int s4 = 0; s4 < 2; ++s4)
                ANVIL_UNROLL
                for (int k2 = 0; k2 < 4; k2 += 2) {
                    __m512i part[2][TT];
                    ANVIL_UNROLL
                    for (int k = 0; k < 2; ++k)
                        ANVIL_UNROLL
                        for (int t = 0; t < TT; ++t) part[k][t] = _mm512_setzero_si512();
                    ANVIL_UNROLL
                    for (int s = 4 * s4; s < 4 * s4 + 4; ++s) {
                        const size_t step = 144 + size_t(h * 8 + s) * 96;
                        ANVIL_UNROLL
                        for (int b = 0; b < 2 && k2 == 0; ++b) {
                            _mm_prefetch(reinterpret_cast<const char*>(tiles[b] + step) + kPrefetchAheadDeep, _MM_HINT_T0);
                            _mm_prefetch(reinterpret_cast<const char*>(tiles[b] + step) + kPrefetchAheadDeep + 64, _MM_HINT_T0);
                        }
                        __m512i q[4];
                        q6_k_pair_step_values(tiles[0] + step, tiles[1] + step, q);
                        ANVIL_UNROLL
                        for (int k = 0; k < 2; ++k)
                            ANVIL_UNROLL
                            for (int t = 0; t < TT; ++t) {
                                int32_t four;
                                std::memcpy(&four, xs[t] + 128 * h + 32 * (k2 + k) + 4 * s, 4);
                                part[k][t] = _mm512_dpbusd_epi32(part[k][t], q[k2 + k], _mm512_set1_epi32(four));
                            }
                    }
                    ANVIL_UNROLL
                    for (int k = 0; k < 2; ++k) {
                        const int j = 8 * h + 2 * (k2 + k) + s4;  // the sub-block of these steps in quarter k2 + k
                        const __m128i select = j % 2 ? odd : even;
                        const __m512i scale = _mm512_cvtepi8_epi32(_mm_unpacklo_epi64(
                            _mm_shuffle_epi8(load128(tiles[0] + 16 + 16 * (j / 2)), select), _mm_shuffle_epi8(load128(tiles[1] + 16 + 16 * (j / 2)), select)));
                        ANVIL_UNROLL
                        for (int t = 0; t < TT; ++t) {
                            sum[t] = _mm512_add_epi32(sum[t], _mm512_mullo_epi32(part[k][t], scale));
                            asm("" : "+v"(sum[t]));  // one chain in one register, as q6_k_packed8_tile
                        }
                    }
                }
        const __m512 d = _mm512_cvtph_ps(side_by_side128(tiles[0], tiles[1]));
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t)
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[t]), _mm512_mul_ps(d, _mm512_set1_ps(x->scales[size_t(t0 + t) * supers + i])),
                                     acc[t]);
    }
    ANVIL_UNROLL
    for (int t = 0; t < TT; ++t) store_pair_rows(acc[t], w.rows, b0, t0 + t, y);
}

// Q6_K for one token, a step a 512-bit register: its first 64 bytes (the low nibbles of quarters 0
// and 2 in lanes 0-7, of quarters 1 and 3 in lanes 8-15) in one load, its 32 bytes of high bit
// pairs broadcast to both halves, which shift by 4 and 2 (quarters 0 and 1) or 0 and 2 (quarters
// 2 and 3) per half so that each value's two high bits land in bits 4-5; one vpternlogd merges them
// with the low nibbles. The two quarters of a register take their activations from one permute of
// 64 activation bytes. A register's halves hold two quarters' sub-blocks, whose scales the
// [quarter 2m rows, quarter 2m + 1 rows] scale bytes multiply as they lie. Blocks (1 or 2) 8-row
// blocks at once, the permutes serving both. The same int32 sums as the 256-bit tile in another
// order, exact, so the same results bit for bit.
template <int Blocks>
void q6_k_packed8_token512(const WeightMatrix& w, int b0, const SuperBlockInput* x, int t0, float* y) {
    static_assert(Blocks == 1 || Blocks == 2);
    const int supers = w.cols / kSuperBlock;
    const size_t block_bytes = size_t(supers) * kQ6_KPacked8Bytes;
    const uint8_t* block = static_cast<const uint8_t*>(w.data) + size_t(b0) * block_bytes;
    __m256 acc[Blocks];
    ANVIL_UNROLL
    for (int b = 0; b < Blocks; ++b) acc[b] = _mm256_setzero_ps();
    // Each row's even or odd scale byte of a pair to the low 8 bytes of each 128-bit half.
    const __m256i even = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1,
                                          0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i odd = _mm256_setr_epi8(1, 3, 5, 7, 9, 11, 13, 15, -1, -1, -1, -1, -1, -1, -1, -1,
                                         1, 3, 5, 7, 9, 11, 13, 15, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const __m512i bits45 = _mm512_set1_epi8(0x30);
    const __m512i up01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);    // quarters 0, 1: << 4, << 2
    const __m512i down23 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);  // quarters 2, 3: >> 0, >> 2
    // Step s's activations of two quarters from their 64 bytes: dword s to lanes 0-7, dword 8 + s to 8-15.
    const __m512i first = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi32(8), 1);
    // (low & 0x0f) | high, where high has no bit outside 0x30: 0xd8 takes the second operand's bit
    // where the third's is set, the first's elsewhere. The first is overwritten (the instruction's
    // destination): the masked high bits, a temporary, where low may be a load still needed.
    const auto merged = [low4](__m512i low, __m512i high) { return _mm512_ternarylogic_epi32(high, low, low4, 0xd8); };
    for (int i = 0; i < supers; ++i) {
        const uint8_t* tiles[Blocks];
        ANVIL_UNROLL
        for (int b = 0; b < Blocks; ++b) tiles[b] = block + size_t(b) * block_bytes + size_t(i) * kQ6_KPacked8Bytes;
        const int8_t* xs = x->values + size_t(t0) * w.cols + size_t(i) * kSuperBlock;
        const int16_t* sums = x->sums + (size_t(t0) * supers + size_t(i)) * 16;
        __m512i folded_sum[Blocks];
        ANVIL_UNROLL
        for (int b = 0; b < Blocks; ++b) folded_sum[b] = _mm512_setzero_si512();
        ANVIL_UNROLL
        for (int h = 0; h < 2; ++h) {
            const __m512i x01 = _mm512_loadu_si512(xs + 128 * h), x23 = _mm512_loadu_si512(xs + 128 * h + 64);
            ANVIL_UNROLL
            for (int s4 = 0; s4 < 2; ++s4) {
                __m512i part01[Blocks], part23[Blocks];
                ANVIL_UNROLL
                for (int b = 0; b < Blocks; ++b) part01[b] = part23[b] = _mm512_setzero_si512();
                ANVIL_UNROLL
                for (int s = 4 * s4; s < 4 * s4 + 4; ++s) {
                    const __m512i pick = _mm512_add_epi32(first, _mm512_set1_epi32(s));
                    const __m512i xa = _mm512_permutexvar_epi32(pick, x01), xb = _mm512_permutexvar_epi32(pick, x23);
                    ANVIL_UNROLL
                    for (int b = 0; b < Blocks; ++b) {
                        const size_t offset = size_t(i) * kQ6_KPacked8Bytes + 144 + size_t(h * 8 + s) * 96;
                        const uint8_t* at = tiles[b] + 144 + size_t(h * 8 + s) * 96;
                        if (s % 2 == 0) {
                            ANVIL_UNROLL
                            for (int line = 0; line < 192; line += 64) {
                                _mm_prefetch(ahead_of(at, offset, block_bytes, b, Blocks, kPrefetchAheadDeep + line), _MM_HINT_T0);
                            }
                        }
                        const __m512i v = _mm512_loadu_si512(at);
                        const __m512i hb = _mm512_broadcast_i64x4(load256(at + 64));
                        const __m512i q01 = merged(v, _mm512_and_si512(_mm512_sllv_epi16(hb, up01), bits45));
                        const __m512i q23 = merged(_mm512_srli_epi16(v, 4), _mm512_and_si512(_mm512_srlv_epi16(hb, down23), bits45));
                        part01[b] = _mm512_dpbusd_epi32(part01[b], q01, xa);
                        part23[b] = _mm512_dpbusd_epi32(part23[b], q23, xb);
                    }
                }
                // The sub-block of quarter k in these steps is 8h + 2k + s4, its scale bytes in pair
                // 4h + k: quarters 0 and 1 in the 32 bytes from pair 4h, 2 and 3 from pair 4h + 2.
                ANVIL_UNROLL
                for (int b = 0; b < Blocks; ++b)
                    ANVIL_UNROLL
                    for (int m = 0; m < 2; ++m) {
                        const __m256i pairs = load256(tiles[b] + 16 + 16 * (4 * h + 2 * m));
                        const __m256i picked = _mm256_shuffle_epi8(pairs, s4 ? odd : even);
                        const __m512i scales = _mm512_cvtepi8_epi32(_mm256_castsi256_si128(_mm256_permute4x64_epi64(picked, 0x08)));
                        folded_sum[b] = _mm512_add_epi32(folded_sum[b], _mm512_mullo_epi32(m ? part23[b] : part01[b], scales));
                    }
            }
        }
        const __m256 x_scale = _mm256_set1_ps(x->scales[size_t(t0) * supers + i]);
        ANVIL_UNROLL
        for (int b = 0; b < Blocks; ++b) {
            const __m256i sum = _mm256_add_epi32(q6_k_start_sums(tiles[b], sums), halves_added(folded_sum[b]));
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tiles[b])));
            acc[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(d, x_scale), acc[b]);
        }
    }
    ANVIL_UNROLL
    for (int b = 0; b < Blocks; ++b) store_rows8(acc[b], w.rows, (b0 + b) * kPack8Rows, t0, y);
}

template <int TT>
void q4_0_packed8_tile(const WeightMatrix& w, int b0, const QuantizedInput* x, int t0, float* y) {
    const int per_row = w.cols / kQ4_0Values;
    const uint8_t* block = static_cast<const uint8_t*>(w.data) + size_t(b0) * size_t(per_row) * kQ4_0Packed8Bytes;
    __m256 acc[TT];
    ANVIL_UNROLL
    for (int t = 0; t < TT; ++t) acc[t] = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0f);
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
        for (int t = 0; t < TT; ++t) {
            // The stored values are q + 8: start from -8 x the activations' sum.
            const size_t g = size_t(t0 + t) * per_row + size_t(i);
            sum[t] = _mm256_set1_epi32(x->less_8_sums[g]);
        }
        ANVIL_UNROLL
        for (int s = 0; s < 4; ++s) {
            const __m256i v = load256(tile + 16 + 32 * s);
            const __m256i lo = _mm256_and_si256(v, low4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) {
                const int8_t* xv = x->values + size_t(t0 + t) * w.cols + size_t(i) * kQ4_0Values;
                sum[t] = _mm256_dpbusd_epi32(sum[t], lo, broadcast4(xv + 4 * s));
                sum[t] = _mm256_dpbusd_epi32(sum[t], hi, broadcast4(xv + 16 + 4 * s));
            }
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile)));
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) {
            const size_t g = size_t(t0 + t) * per_row + size_t(i);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[t]), _mm256_mul_ps(d, _mm256_set1_ps(x->scales[g])), acc[t]);
        }
    }
    ANVIL_UNROLL
    for (int t = 0; t < TT; ++t) store_rows8(acc[t], w.rows, b0 * kPack8Rows, t0 + t, y);
}

// Q4_0 for TT tokens over a pair of 8-row blocks, 512 bits a step: the two blocks' 32 bytes of a
// step side by side (one insert and the unpacking, shared by the TT tokens), each token's four
// activations a plain broadcast against them, so each product serves 16 rows, not the 256-bit
// tile's 8. The float steps are the 256-bit tile's lane for lane (the same bits).
template <int TT>
void q4_0_pair512_tile(const WeightMatrix& w, int b0, const QuantizedInput* x, int t0, float* y) {
    const int per_row = w.cols / kQ4_0Values;
    const size_t block_bytes = size_t(per_row) * kQ4_0Packed8Bytes;
    const uint8_t* block = static_cast<const uint8_t*>(w.data) + size_t(b0) * block_bytes;
    __m512 acc[TT];
    ANVIL_UNROLL
    for (int t = 0; t < TT; ++t) acc[t] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (int i = 0; i < per_row; ++i) {
        const uint8_t* tiles[2] = {block + size_t(i) * kQ4_0Packed8Bytes, block + block_bytes + size_t(i) * kQ4_0Packed8Bytes};
        ANVIL_UNROLL
        for (int b = 0; b < 2; ++b)
            ANVIL_UNROLL
            for (int line = 0; line < 192; line += 64) {
                _mm_prefetch(reinterpret_cast<const char*>(tiles[b]) + kPrefetchAhead + line, _MM_HINT_T0);
                _mm_prefetch(reinterpret_cast<const char*>(tiles[b]) + kPrefetchFar + line, _MM_HINT_T1);
            }
        __m512i sum[TT];
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) sum[t] = _mm512_set1_epi32(x->less_8_sums[size_t(t0 + t) * per_row + size_t(i)]);
        ANVIL_UNROLL
        for (int s = 0; s < 4; ++s) {
            const __m512i v = side_by_side256(tiles[0] + 16 + 32 * s, tiles[1] + 16 + 32 * s);
            const __m512i lo = _mm512_and_si512(v, low4);
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) {
                const int8_t* xv = x->values + size_t(t0 + t) * w.cols + size_t(i) * kQ4_0Values;
                int32_t four[2];
                std::memcpy(&four[0], xv + 4 * s, 4);
                std::memcpy(&four[1], xv + 16 + 4 * s, 4);
                sum[t] = _mm512_dpbusd_epi32(sum[t], lo, _mm512_set1_epi32(four[0]));
                sum[t] = _mm512_dpbusd_epi32(sum[t], hi, _mm512_set1_epi32(four[1]));
            }
        }
        const __m512 d = _mm512_cvtph_ps(side_by_side128(tiles[0], tiles[1]));
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) {
            const size_t g = size_t(t0 + t) * per_row + size_t(i);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[t]), _mm512_mul_ps(d, _mm512_set1_ps(x->scales[g])), acc[t]);
        }
    }
    ANVIL_UNROLL
    for (int t = 0; t < TT; ++t) store_pair_rows(acc[t], w.rows, b0, t0 + t, y);
}

// Q4_0 for one token with two steps a 512-bit register (as q4_k_packed8_token512), over Blocks
// (1 or 2) 8-row blocks at once: the activations' permutes (port 5, as many as the products) and
// broadcasts serve both blocks, and their two sums fold into one register for the float steps,
// which are the 256-bit tile's lane for lane (the same bits).
template <int Blocks>
void q4_0_packed8_token512(const WeightMatrix& w, int b0, const QuantizedInput* x, int t0, float* y) {
    static_assert(Blocks == 1 || Blocks == 2);
    const int per_row = w.cols / kQ4_0Values;
    const size_t block_bytes = size_t(per_row) * kQ4_0Packed8Bytes;
    const uint8_t* block = static_cast<const uint8_t*>(w.data) + size_t(b0) * block_bytes;
    __m512 acc = _mm512_setzero_ps();  // [block b0's 8 rows, block b0 + 1's] (one block: the low half)
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (int i = 0; i < per_row; ++i) {
        const uint8_t* tiles[Blocks];
        ANVIL_UNROLL
        for (int b = 0; b < Blocks; ++b) {
            tiles[b] = block + size_t(b) * block_bytes + size_t(i) * kQ4_0Packed8Bytes;
            const size_t offset = size_t(i) * kQ4_0Packed8Bytes;
            ANVIL_UNROLL
            for (int line = 0; line < 192; line += 64) {
                _mm_prefetch(ahead_of(tiles[b], offset, block_bytes, b, Blocks, kPrefetchAheadDeep + line), _MM_HINT_T0);
            }
        }
        const size_t g = size_t(t0) * per_row + size_t(i);
        const int8_t* xv = x->values + g * kQ4_0Values;
        const __m512i xa[2] = {two_steps(xv), two_steps(xv + 8)}, xb[2] = {two_steps(xv + 16), two_steps(xv + 24)};
        __m512i sum[Blocks];
        ANVIL_UNROLL
        for (int b = 0; b < Blocks; ++b) {
            sum[b] = _mm512_setzero_si512();
            ANVIL_UNROLL
            for (int s = 0; s < 2; ++s) {
                const __m512i v = _mm512_loadu_si512(tiles[b] + 16 + 64 * s);
                sum[b] = _mm512_dpbusd_epi32(sum[b], _mm512_and_si512(v, low4), xa[s]);
                sum[b] = _mm512_dpbusd_epi32(sum[b], _mm512_and_si512(_mm512_srli_epi16(v, 4), low4), xb[s]);
            }
        }
        // The stored values are q + 8: less 8 x the activations' sum.
        const __m512i less_8_sums = _mm512_set1_epi32(x->less_8_sums[g]);
        const __m128i d0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(tiles[0]));
        __m512i total;
        __m256i d;
        if constexpr (Blocks == 2) {
            total = _mm512_add_epi32(pair_halves_added(sum[0], sum[1]), less_8_sums);
            d = _mm256_inserti128_si256(_mm256_castsi128_si256(d0), _mm_loadu_si128(reinterpret_cast<const __m128i*>(tiles[1])), 1);
        } else {
            // Zero upper halves: no stray NaN or denormal reaches the float steps.
            total = _mm512_zextsi256_si512(_mm256_add_epi32(halves_added(sum[0]), _mm512_castsi512_si256(less_8_sums)));
            d = _mm256_zextsi128_si256(d0);
        }
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(_mm512_cvtph_ps(d), _mm512_set1_ps(x->scales[g])), acc);
    }
    ANVIL_UNROLL
    for (int b = 0; b < Blocks; ++b)
        store_rows8(b == 0 ? _mm512_castps512_ps256(acc) : _mm512_extractf32x8_ps(acc, 1), w.rows, (b0 + b) * kPack8Rows, t0, y);
}

// An item's tokens from c0 on the 512-bit pair tile, eight at a time and then four, where the item
// has both its blocks; returns the first token left to the one-token tiles (or, an item of one
// block, to the 256-bit tiles). Against the 256-bit tile four tokens at a time (kernel_ab, 2
// threads, outputs identical): 512 tokens at 4096 x 4096 1.55x, 64 at 1024 x 2816 1.60x, 8 tokens
// 1.51x, 5 tokens (a speculative check) 1.28x; twelve tokens a tile gained no more.
int q4_0_pair512_runs(const WeightMatrix& w, int item, const QuantizedInput* x, int c0, int c1, float* y) {
    const int b0 = item * 2;
    if (pack8_blocks(w.rows) - b0 < 2) return c0;
    for (; c1 - c0 >= 8; c0 += 8) q4_0_pair512_tile<8>(w, b0, x, c0, y);
    if (c1 - c0 >= 4) q4_0_pair512_tile<4>(w, b0, x, c0, y), c0 += 4;
    return c0;
}

// The same for Q4_K, four tokens a tile (six gained no more). Against q4_k_packed8_tile four tokens
// at a time (kernel_ab, 2 threads, outputs identical): 512 tokens at 4096 x 4096 1.42x, at 4096 x
// 14336 1.49x, 64 at 1024 x 2816 1.37x, 8 tokens 1.34x, 5 tokens 1.26x.
int q4_k_pair512_runs(const WeightMatrix& w, int item, const SuperBlockInput* x, int c0, int c1, float* y) {
    const int b0 = item * 2;
    if (pack8_blocks(w.rows) - b0 < 2) return c0;
    for (; c1 - c0 >= 4; c0 += 4) q4_k_pair512_tile<4>(w, b0, x, c0, y);
    return c0;
}

// And for Q6_K, six tokens a tile and then four; two left take the 256-bit tile of two (a pair
// tile of two gained nothing). Against q6_k_packed8_tile four tokens at a time (kernel_ab, 2
// threads, outputs identical): 512 tokens at 4096 x 4096 1.31x, at 4096 x 14336 1.35x, 64 at
// 1024 x 2816 1.30x, 8 tokens 1.14x, 5 tokens 1.17x.
int q6_k_pair512_runs(const WeightMatrix& w, int item, const SuperBlockInput* x, int c0, int c1, float* y) {
    const int b0 = item * 2;
    if (pack8_blocks(w.rows) - b0 < 2) return c0;
    for (; c1 - c0 >= 6; c0 += 6) q6_k_pair512_tile<6>(w, b0, x, c0, y);
    if (c1 - c0 >= 4) q6_k_pair512_tile<4>(w, b0, x, c0, y), c0 += 4;
    return c0;
}

// Where `amx` asks, the whole runs of kAmxTokens tokens from c0 on the AMX tiles (matmul_amx.cpp,
// the same bits); returns the first token left to the VNNI tiles.
template <typename Input, void (*AmxItem)(const WeightMatrix&, int, const Input*, int, int, float*)>
int amx_runs(bool amx, const WeightMatrix& w, int item, const Input* x, int c0, int c1, float* y) {
    const int whole = amx_tokens_end(amx, c0, c1);
    if (whole > c0) AmxItem(w, item, x, c0, whole, y);
    return whole;
}

}  // namespace

void matmul_vnni_blocks(const WeightMatrix* ws, float* const* ys, int count, const QuantizedInput* q32,
                        const SuperBlockInput* q256, int n_tokens, bool amx) {
    if (ws[0].type == WeightType::Q4_0Packed8)
        return run_items(ws, ys, count, n_tokens, packed8_items, [q32, amx](const WeightMatrix& w, int item, int c0, int c1, float* y) {
            c0 = amx_runs<QuantizedInput, amx_q4_0_item>(amx, w, item, q32, c0, c1, y);
            c0 = q4_0_pair512_runs(w, item, q32, c0, c1, y);
            packed8_item_paired<QuantizedInput, 4, q4_0_packed8_tile<4>, q4_0_packed8_token512<1>, q4_0_packed8_token512<2>>(w, item, q32, c0, c1, y);
        });
    // Q4_K and Q6_K, alone or together in one step (a Q4_K_M model's q, k and v): each item by its
    // matrix's kernels.
    run_items(ws, ys, count, n_tokens, packed8_items, [q256, amx](const WeightMatrix& w, int item, int c0, int c1, float* y) {
        if (w.type == WeightType::Q6_KPacked8) {
            c0 = amx_runs<SuperBlockInput, amx_q6_k_item>(amx, w, item, q256, c0, c1, y);
            c0 = q6_k_pair512_runs(w, item, q256, c0, c1, y);
            // Four tokens a tile though its partial sums spill: each step's unpacking (about 14
            // vector operations, against 8 a token) serves twice the tokens; 512-token products
            // 1.10-1.17x without AMX (docs/PERFORMANCE.md, "Tiles of several tokens").
            packed8_item_four_two<SuperBlockInput, q6_k_packed8_tile<4>, q6_k_packed8_tile<2>, q6_k_packed8_token512<1>,
                                  q6_k_packed8_token512<2>>(w, item, q256, c0, c1, y);
        } else {
            c0 = amx_runs<SuperBlockInput, amx_q4_k_item>(amx, w, item, q256, c0, c1, y);
            c0 = q4_k_pair512_runs(w, item, q256, c0, c1, y);
            packed8_item_paired<SuperBlockInput, 4, q4_k_packed8_tile<1, 4>, q4_k_packed8_token512<1>, q4_k_packed8_token512<2>>(w, item, q256, c0, c1,
                                                                                                                    y);
        }
    });
}

}  // namespace anvil::kernels::detail
