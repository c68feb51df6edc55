// Batched products (prefill) with the AMX int8 tiles, on processors that have them (Sapphire
// Rapids on): packed q8 (q8 and GGUF Q8_0 models) and GGUF's Q4_0, Q4_K and Q6_K packed by 8 rows.
// One tile multiply takes 16 tokens' activations (signed, straight from the int8 rows) times a
// 16-row operand: 8192 multiply-adds for a group of 32 columns, where a VNNI instruction does 64.
// Packed q8 already is that operand: a group's 32 columns of a 16-row block are 8 runs of 4
// columns, 64 bytes each (the 16 rows' 4 values, +128: unsigned, TDPBSUD). The GGUF formats' two
// 8-row blocks of an item are unpacked into such operands once per run of tokens: Q4_K's values
// 0..15 as they are (TDPBSUD), Q4_0's and Q6_K's as the signed values their stored bias stands
// for (-8..7, -32..31: TDPBSSD), so their sums need no offset taken off per group.
//
// Each group's (Q4_K: sub-block's; Q6_K: 16-value sub-block's) int32 sums are the VNNI tile's
// exact integers, and then take its steps: packed q8's offset, the rows' integer scales, the
// conversion and the float scales in the same order (matmul_avx512vnni.cpp,
// matmul_vnni_blocks.cpp). So each (token, row) result is bit for bit the VNNI tile's, and a
// token's result still does not depend on the batch (kernels/matmul.hpp). What bounds these loops
// is a tile store and 16 x 16 lanes of float work for every group; the two hardly overlap, and
// neither reordering nor sharing a weights tile among runs of tokens helped (docs/PERFORMANCE.md,
// "AMX prefill").
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/ggml_blocks.hpp"
#include "kernels/matmul.hpp"
#include "kernels/matmul_blocks_common.hpp"

namespace anvil::kernels::detail {
namespace {

// LDTILECFG's 64 bytes (palette 1): each tile's bytes per row and rows.
struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t bytes_per_row[16] = {};
    uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// tmm0, tmm1: two groups' sums, 16 tokens x 16 rows of int32; tmm2, tmm3: their activations, 16
// tokens x 32 bytes; tmm4, tmm5: their weights, 8 runs x 64 bytes.
TileConfig group_tiles() {
    TileConfig c;
    for (int sum : {0, 1}) c.rows[sum] = kAmxTokens, c.bytes_per_row[sum] = kQ8PackRows * 4;
    for (int act : {2, 3}) c.rows[act] = kAmxTokens, c.bytes_per_row[act] = kQ8Group;
    for (int wt : {4, 5}) c.rows[wt] = kQ8Group / 4, c.bytes_per_row[wt] = kQ8PackRows * 4;
    return c;
}

// The same for Q6_K's sub-blocks of 16 values: activations 16 tokens x 16 bytes, weights 4 runs.
TileConfig sub_block16_tiles() {
    TileConfig c = group_tiles();
    for (int act : {2, 3}) c.bytes_per_row[act] = 16;
    for (int wt : {4, 5}) c.rows[wt] = 4;
    return c;
}

// Sums tile `sum` = activations tile `act` (16 tokens from `a`, a row every `stride` bytes) times
// weights tile `wt` (the 64-byte runs at `operand`: unsigned with `dp` _tile_dpbsud, signed with
// _tile_dpbssd), stored to `out`. A macro: GCC's tile intrinsics take the tile numbers as literals.
#define ANVIL_TILE_PRODUCT(sum, act, wt, a, stride, operand, out, dp) \
    do {                                                              \
        _tile_zero(sum);                                              \
        _tile_loadd(act, a, stride);                                  \
        _tile_loadd(wt, operand, 64);                                 \
        dp(sum, act, wt);                                             \
        _tile_stored(sum, out, 64);                                   \
    } while (0)

using GroupSums = int32_t[kAmxTokens][kQ8PackRows];

// The f16 factors of an item's 8 + 8 rows (d; Q4_K's dmin), at `offset` in each block's tile; a
// lone last block's missing 8 are zeros.
inline void both_blocks_f16(uint16_t out[16], const uint8_t* const tiles[2], int blocks, int offset) {
    for (int b = 0; b < 2; ++b) {
        if (b < blocks) std::memcpy(out + 8 * b, tiles[b] + offset, 16);
        else std::memset(out + 8 * b, 0, 16);
    }
}

// One group's sums into the 16 tokens' accumulators, as the VNNI tiles add them: the offset in
// int32 (none for signed weights, whose sums need none), then the rows' scales x the token's.
template <typename OffsetOf>
inline void scale_group(const GroupSums& sums, __m512 w_scale, const float* x_scales, int groups, OffsetOf offset_of, int t0, int g,
                        __m512 acc[kAmxTokens]) {
#pragma GCC unroll 16
    for (int m = 0; m < kAmxTokens; ++m) {
        const size_t at = size_t(t0 + m) * groups + g;
        __m512i dot = _mm512_load_si512(sums[m]);
        if constexpr (!std::is_same_v<OffsetOf, std::nullptr_t>) dot = _mm512_add_epi32(dot, _mm512_set1_epi32(offset_of(at)));
        const __m512 scale = _mm512_mul_ps(w_scale, _mm512_set1_ps(x_scales[at]));
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[m]);
    }
}

// 16 rows from r0 (`live` of them stored) times tokens t0..t1 (whole runs of 16): each group's
// weights are 512 bytes at `weights` + 512 g as a tile multiply's second operand (unsigned with an
// `offset_of(token x groups + g)` for their stored bias; signed where offset_of is nullptr), its
// 16 rows' scales f16 at `w_scales` + 16 g; `values` the int8 activations [tokens][cols] with
// their scales. Each group is multiplied, stored and scaled in turn: storing a step's sums one
// step after its products, and scaling them one step later still, was 3-7% slower (measured with
// tests/bench/kernel_ab.sh --level amx): what bounds the loop is the tile stores' cost, not their
// latency (docs/PERFORMANCE.md, "AMX prefill").
template <typename OffsetOf>
void amx_rows16(const uint8_t* weights, const uint16_t* w_scales, int cols, const int8_t* values, const float* x_scales, OffsetOf offset_of,
                int t0, int t1, int r0, int rows, float* y) {
    const int groups = cols / kQ8Group;
    const __mmask16 live = __mmask16((1u << std::min(kQ8PackRows, rows - r0)) - 1);
    static const TileConfig config = group_tiles();
    _tile_loadconfig(&config);
    alignas(64) GroupSums sums[2];
    const auto row_scales = [w_scales](int g) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w_scales + size_t(g) * kQ8PackRows)));
    };
    for (int t = t0; t < t1; t += kAmxTokens) {
        const int8_t* activations = values + size_t(t) * cols;
        __m512 acc[kAmxTokens];  // registers: every loop over them unrolled
#pragma GCC unroll 16
        for (auto& a : acc) a = _mm512_setzero_ps();
        for (int g = 0; g < groups; g += 2) {
            const bool pair = g + 1 < groups;
            const int8_t* a = activations + size_t(g) * kQ8Group;
            const uint8_t* operand = weights + size_t(g) * kQ8Group * kQ8PackRows;
            const uint8_t* next = operand + kQ8Group * kQ8PackRows;
            if constexpr (std::is_same_v<OffsetOf, std::nullptr_t>) {
                ANVIL_TILE_PRODUCT(0, 2, 4, a, cols, operand, sums[0], _tile_dpbssd);
                if (pair) ANVIL_TILE_PRODUCT(1, 3, 5, a + kQ8Group, cols, next, sums[1], _tile_dpbssd);
            } else {
                ANVIL_TILE_PRODUCT(0, 2, 4, a, cols, operand, sums[0], _tile_dpbsud);
                if (pair) ANVIL_TILE_PRODUCT(1, 3, 5, a + kQ8Group, cols, next, sums[1], _tile_dpbsud);
            }
            scale_group(sums[0], row_scales(g), x_scales, groups, offset_of, t, g, acc);
            if (pair) scale_group(sums[1], row_scales(g + 1), x_scales, groups, offset_of, t, g + 1, acc);
        }
#pragma GCC unroll 16
        for (int m = 0; m < kAmxTokens; ++m) _mm512_mask_storeu_ps(y + size_t(t + m) * rows + r0, live, acc[m]);
    }
    // Back to the init state: a context switch then saves no tile data.
    _tile_release();
}

}  // namespace

void amx_packed_block(const WeightMatrix& w, int block, const Int8Input* x, int t0, int t1, float* y) {
    const int groups = w.cols / kQ8Group;
    const uint8_t* weights = static_cast<const uint8_t*>(w.data) + size_t(block) * kQ8PackRows * size_t(w.cols);
    const int32_t* offsets = x->offsets;
    amx_rows16(weights, w.scales_f16 + size_t(block) * size_t(groups) * kQ8PackRows, w.cols, x->values, x->scales,
               [offsets](size_t at) { return offsets[at]; }, t0, t1, block * kQ8PackRows, w.rows, y);
}

void amx_q4_0_item(const WeightMatrix& w, int item, const QuantizedInput* x, int t0, int t1, float* y) {
    // The item's two 8-row blocks as one 16-row operand a group, unpacked once for all its runs of
    // tokens: a step's 32 bytes of each block (4 columns of its 8 rows, the low nibbles one run,
    // the high ones the run 16 columns on) side by side, and the blocks' 8 + 8 scales.
    const int groups = w.cols / kQ4_0Values;
    const int b0 = item * 2;
    const int blocks = std::min(2, pack8_blocks(w.rows) - b0);
    const size_t block_bytes = size_t(groups) * kQ4_0Packed8Bytes;
    thread_local std::vector<uint8_t> weights;
    thread_local std::vector<uint16_t> scales;
    if (weights.size() < size_t(groups) * 512) weights.resize(size_t(groups) * 512);
    if (scales.size() < size_t(groups) * 16) scales.resize(size_t(groups) * 16);
    const __m512i low4 = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
    for (int g = 0; g < groups; ++g) {
        const uint8_t* tiles[2];
        for (int b = 0; b < 2; ++b)
            tiles[b] = static_cast<const uint8_t*>(w.data) + size_t(b0 + std::min(b, blocks - 1)) * block_bytes + size_t(g) * kQ4_0Packed8Bytes;
        both_blocks_f16(&scales[size_t(g) * 16], tiles, blocks, 0);
        for (int s = 0; s < 4; ++s) {
            const __m256i first = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tiles[0] + 16 + 32 * s));
            const __m256i second = blocks == 2 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tiles[1] + 16 + 32 * s))
                                               : _mm256_set1_epi8(char(0x88));  // no rows: q = 8, value 0
            const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(first), second, 1);
            uint8_t* runs = &weights[size_t(g) * 512];
            _mm512_storeu_si512(runs + 64 * s, _mm512_sub_epi8(_mm512_and_si512(both, low4), eight));
            _mm512_storeu_si512(runs + 64 * (s + 4), _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(both, 4), low4), eight));
        }
    }
    // Unpacked as the signed values -8..7 (the stored q + 8, less 8): the sums are the VNNI tile's
    // once it has taken 8 x the activations' sum off, with no offset to add.
    amx_rows16(weights.data(), scales.data(), w.cols, x->values, x->scales, nullptr, t0, t1, b0 * kPack8Rows, w.rows, y);
}

namespace {

// An item of two 8-row blocks of a K-quant (the second missing for a lone last block: its 8 lanes
// are zeros and never stored), unpacked once for all its runs of tokens into a Super a super-block
// (`unpack(super, tiles, blocks)`, tiles: the two blocks' tiles of it, the first twice where there
// is one); then for each run of 16 tokens and each super-block in turn, `add(super, i, t,
// activations, sums, acc)` adds its products to the 16 tokens' accumulators of 16 rows.
template <typename Super, typename Unpack, typename Add>
void amx_super_item(const WeightMatrix& w, int item, size_t tile_bytes, const TileConfig& config, const int8_t* values, int t0, int t1,
                    float* y, Unpack unpack, Add add) {
    const int supers = w.cols / kSuperBlock;
    const int b0 = item * 2;
    const int blocks = std::min(2, pack8_blocks(w.rows) - b0);
    const size_t block_bytes = size_t(supers) * tile_bytes;
    thread_local std::vector<Super> unpacked;
    if (unpacked.size() < size_t(supers)) unpacked.resize(size_t(supers));
    for (int i = 0; i < supers; ++i) {
        const uint8_t* tiles[2];
        for (int b = 0; b < 2; ++b)
            tiles[b] = static_cast<const uint8_t*>(w.data) + size_t(b0 + std::min(b, blocks - 1)) * block_bytes + size_t(i) * tile_bytes;
        unpack(unpacked[size_t(i)], tiles, blocks);
    }
    const int r0 = b0 * kPack8Rows;
    const __mmask16 live = __mmask16((1u << std::min(16, w.rows - r0)) - 1);
    _tile_loadconfig(&config);
    alignas(64) GroupSums sums[2];
    alignas(64) float acc[kAmxTokens][16];
    for (int t = t0; t < t1; t += kAmxTokens) {
        const int8_t* activations = values + size_t(t) * w.cols;
        for (auto& a : acc) _mm512_store_ps(a, _mm512_setzero_ps());
        for (int i = 0; i < supers; ++i) add(unpacked[size_t(i)], i, t, activations + size_t(i) * kSuperBlock, sums, acc);
        for (int m = 0; m < kAmxTokens; ++m) _mm512_mask_storeu_ps(y + size_t(t + m) * w.rows + r0, live, _mm512_load_ps(acc[m]));
    }
    _tile_release();
}

}  // namespace

void amx_q4_k_item(const WeightMatrix& w, int item, const SuperBlockInput* x, int t0, int t1, float* y) {
    // A super-block's sub-block operands (a chunk's step of each block side by side, the low
    // nibbles sub-block 2c, the high ones 2c + 1), the 16 rows' scale of each sub-block (u8),
    // their d and dmin, and their mins widened to int16 pairs as the offsets' vpdpwssd takes them.
    struct alignas(64) Super {
        uint8_t operands[8][512];
        uint8_t scales[8][16];
        uint16_t d[16], dmin[16];
        int16_t mins[4][32];
    };
    const int supers = w.cols / kSuperBlock;
    const auto unpack = [](Super& u, const uint8_t* const tiles[2], int blocks) {
        both_blocks_f16(u.d, tiles, blocks, 0);
        both_blocks_f16(u.dmin, tiles, blocks, 16);
        for (int b = 0; b < 2; ++b) {
            const bool none = b >= blocks;
            for (int j = 0; j < 8; ++j)
                for (int r = 0; r < 8; ++r) u.scales[j][8 * b + r] = none ? 0 : tiles[b][32 + 8 * j + r];
            for (int p = 0; p < 4; ++p)
                for (int k = 0; k < 16; ++k) u.mins[p][16 * b + k] = none ? 0 : tiles[b][96 + 16 * p + k];
        }
        const __m512i low4 = _mm512_set1_epi8(0x0f);
        for (int c = 0; c < 4; ++c)
            for (int step = 0; step < 8; ++step) {
                const size_t at = 160 + size_t(c * 8 + step) * 32;
                const __m256i first = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tiles[0] + at));
                const __m256i second = blocks == 2 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tiles[1] + at)) : _mm256_setzero_si256();
                const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(first), second, 1);
                _mm512_storeu_si512(u.operands[2 * c] + 64 * step, _mm512_and_si512(both, low4));
                _mm512_storeu_si512(u.operands[2 * c + 1] + 64 * step, _mm512_and_si512(_mm512_srli_epi16(both, 4), low4));
            }
    };
    const auto add = [x, supers, cols = w.cols](const Super& u, int i, int t, const int8_t* a, GroupSums sums[2], float acc[][16]) {
        // As the VNNI tile: each sub-block's exact sums times the rows' scale, added in int32.
        __m512i sum[kAmxTokens];
        for (auto& v : sum) v = _mm512_setzero_si512();
        for (int j = 0; j < 8; j += 2) {
            ANVIL_TILE_PRODUCT(0, 2, 4, a + 32 * j, cols, u.operands[j], sums[0], _tile_dpbsud);
            ANVIL_TILE_PRODUCT(1, 3, 5, a + 32 * (j + 1), cols, u.operands[j + 1], sums[1], _tile_dpbsud);
            const __m512i scale_a = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(u.scales[j])));
            const __m512i scale_b = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(u.scales[j + 1])));
            for (int m = 0; m < kAmxTokens; ++m)
                sum[m] = _mm512_add_epi32(sum[m], _mm512_add_epi32(_mm512_mullo_epi32(_mm512_load_si512(sums[0][m]), scale_a),
                                                                   _mm512_mullo_epi32(_mm512_load_si512(sums[1][m]), scale_b)));
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(u.d)));
        const __m512 dmin = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(u.dmin)));
        for (int m = 0; m < kAmxTokens; ++m) {
            const size_t at = size_t(t + m) * supers + size_t(i);
            const int16_t* sums32 = x->sums32 + at * 8;
            __m512i offsets = _mm512_setzero_si512();
            for (int p = 0; p < 4; ++p) {
                int32_t pair;
                std::memcpy(&pair, sums32 + 2 * p, 4);
                offsets = _mm512_dpwssd_epi32(offsets, _mm512_load_si512(u.mins[p]), _mm512_set1_epi32(pair));
            }
            const __m512 x_scale = _mm512_set1_ps(x->scales[at]);
            __m512 total = _mm512_load_ps(acc[m]);
            total = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[m]), _mm512_mul_ps(d, x_scale), total);
            total = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(offsets), _mm512_mul_ps(dmin, x_scale), total);
            _mm512_store_ps(acc[m], total);
        }
    };
    static const TileConfig config = group_tiles();
    amx_super_item<Super>(w, item, kQ4_KPacked8Bytes, config, x->values, t0, t1, y, unpack, add);
}

void amx_q6_k_item(const WeightMatrix& w, int item, const SuperBlockInput* x, int t0, int t1, float* y) {
    // A super-block's 16 sub-blocks' operands (a step's quarter of each block side by side, as the
    // signed values -32..31: the stored q + 32, less 32), the rows' scale of each sub-block (i8)
    // and their d.
    struct alignas(64) Super {
        int8_t operands[16][256];
        int8_t scales[16][16];
        uint16_t d[16];
    };
    const int supers = w.cols / kSuperBlock;
    const auto unpack = [](Super& u, const uint8_t* const tiles[2], int blocks) {
        both_blocks_f16(u.d, tiles, blocks, 0);
        for (int b = 0; b < 2; ++b)
            for (int p = 0; p < 8; ++p)
                for (int k = 0; k < 16; ++k)
                    u.scales[2 * p + k % 2][8 * b + k / 2] = b < blocks ? int8_t(tiles[b][16 + 16 * p + k]) : int8_t(0);
        const __m256i thirty_two = _mm256_set1_epi8(32);
        for (int h = 0; h < 2; ++h)
            for (int step = 0; step < 8; ++step) {
                __m256i q[2][4];
                for (int b = 0; b < 2; ++b) {
                    if (b < blocks) {
                        q6_k_step_values(tiles[b] + 144 + size_t(h * 8 + step) * 96, q[b]);
                        for (auto& v : q[b]) v = _mm256_sub_epi8(v, thirty_two);
                    } else {
                        for (auto& v : q[b]) v = _mm256_setzero_si256();
                    }
                }
                for (int k = 0; k < 4; ++k) {
                    const int j = 8 * h + 2 * k + step / 4;
                    _mm512_storeu_si512(u.operands[j] + 64 * (step % 4), _mm512_inserti64x4(_mm512_castsi256_si512(q[0][k]), q[1][k], 1));
                }
            }
    };
    const auto add = [x, supers, cols = w.cols](const Super& u, int i, int t, const int8_t* a, GroupSums sums[2], float acc[][16]) {
        // Each sub-block's exact sums (of the signed values: the VNNI tile's once it has taken 32
        // x the scales x the activations' sums off) times its scale, added in int32.
        __m512i sum[kAmxTokens];
        for (auto& v : sum) v = _mm512_setzero_si512();
        for (int j = 0; j < 16; j += 2) {
            ANVIL_TILE_PRODUCT(0, 2, 4, a + 16 * j, cols, u.operands[j], sums[0], _tile_dpbssd);
            ANVIL_TILE_PRODUCT(1, 3, 5, a + 16 * (j + 1), cols, u.operands[j + 1], sums[1], _tile_dpbssd);
            const __m512i scale_a = _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(u.scales[j])));
            const __m512i scale_b = _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(u.scales[j + 1])));
            for (int m = 0; m < kAmxTokens; ++m)
                sum[m] = _mm512_add_epi32(_mm512_add_epi32(sum[m], _mm512_mullo_epi32(_mm512_load_si512(sums[0][m]), scale_a)),
                                          _mm512_mullo_epi32(_mm512_load_si512(sums[1][m]), scale_b));
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(u.d)));
        for (int m = 0; m < kAmxTokens; ++m) {
            const __m512 x_scale = _mm512_set1_ps(x->scales[size_t(t + m) * supers + size_t(i)]);
            _mm512_store_ps(acc[m], _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[m]), _mm512_mul_ps(d, x_scale), _mm512_load_ps(acc[m])));
        }
    };
    static const TileConfig config = sub_block16_tiles();
    amx_super_item<Super>(w, item, kQ6_KPacked8Bytes, config, x->values, t0, t1, y, unpack, add);
}

}  // namespace anvil::kernels::detail
