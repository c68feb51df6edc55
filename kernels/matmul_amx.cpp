// Packed q8 weights (WeightType::Q8Packed) times a batch of int8 activations with the AMX int8
// tiles: the prefill product of q8 and GGUF Q8_0 models on processors with AMX (Sapphire Rapids
// on). The packed layout already is what a tile multiply takes as its second operand: a group's 32
// columns of a 16-row block are 8 runs of 4 columns, 64 bytes each (the 16 rows' 4 values, +128),
// so one TDPBSUD takes 16 tokens' 32 activations of a group (signed, straight from the int8 rows)
// by those 512 bytes (unsigned) into 16 x 16 int32 sums: 8192 multiply-adds where a VNNI
// instruction does 64.
//
// A group's sums then take its scales in floats, and that is the VNNI tile's work exactly: the
// offset of 128 x the activations' sum added in int32, converted, multiplied by the rows' scales x
// the token's, and added to the accumulator in group order (matmul_avx512vnni.cpp, packed_tile).
// So each (token, row) result is bit for bit what the VNNI tile gives, and a token's result still
// does not depend on the batch (kernels/matmul.hpp). That float work, 16 x 16 lanes a group, is
// what bounds this loop, not the tiles: two groups are in flight so the tiles of one run while
// the other's sums are scaled.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/matmul.hpp"

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

using GroupSums = int32_t[kAmxTokens][kQ8PackRows];

// One group's sums into the 16 tokens' accumulators, as packed_tile<1, 1> adds them.
inline void scale_group(const GroupSums& sums, __m512 w_scale, const Int8Input* x, int t0, int g, __m512 acc[kAmxTokens]) {
    for (int m = 0; m < kAmxTokens; ++m) {
        const size_t at = size_t(t0 + m) * x->groups + g;
        const __m512i dot = _mm512_add_epi32(_mm512_load_si512(sums[m]), _mm512_set1_epi32(x->offsets[at]));
        const __m512 scale = _mm512_mul_ps(w_scale, _mm512_set1_ps(x->scales[at]));
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[m]);
    }
}

}  // namespace

void amx_packed_block(const WeightMatrix& w, int block, const Int8Input* x, int t0, int t1, float* y) {
    const int cols = w.cols;
    const int groups = cols / kQ8Group;
    const uint8_t* weights = static_cast<const uint8_t*>(w.data) + size_t(block) * kQ8PackRows * size_t(cols);
    const uint16_t* w_scales = w.scales_f16 + size_t(block) * size_t(groups) * kQ8PackRows;
    const int r0 = block * kQ8PackRows;
    const __mmask16 live = __mmask16((1u << std::min(kQ8PackRows, w.rows - r0)) - 1);
    static const TileConfig config = group_tiles();
    _tile_loadconfig(&config);
    alignas(64) GroupSums sums[2];
    for (int t = t0; t < t1; t += kAmxTokens) {
        const int8_t* activations = x->values + size_t(t) * cols;
        __m512 acc[kAmxTokens];
        for (auto& a : acc) a = _mm512_setzero_ps();
        for (int g = 0; g < groups; g += 2) {
            const bool pair = g + 1 < groups;
            _tile_zero(0);
            _tile_loadd(2, activations + size_t(g) * kQ8Group, cols);
            _tile_loadd(4, weights + size_t(g) * kQ8Group * kQ8PackRows, kQ8PackRows * 4);
            _tile_dpbsud(0, 2, 4);
            _tile_stored(0, sums[0], kQ8PackRows * 4);
            if (pair) {
                _tile_zero(1);
                _tile_loadd(3, activations + size_t(g + 1) * kQ8Group, cols);
                _tile_loadd(5, weights + size_t(g + 1) * kQ8Group * kQ8PackRows, kQ8PackRows * 4);
                _tile_dpbsud(1, 3, 5);
                _tile_stored(1, sums[1], kQ8PackRows * 4);
            }
            scale_group(sums[0], _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w_scales + size_t(g) * kQ8PackRows))),
                        x, t, g, acc);
            if (pair)
                scale_group(sums[1],
                            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w_scales + size_t(g + 1) * kQ8PackRows))),
                            x, t, g + 1, acc);
        }
        for (int m = 0; m < kAmxTokens; ++m) _mm512_mask_storeu_ps(y + size_t(t + m) * w.rows + r0, live, acc[m]);
    }
    // Back to the init state: a context switch then saves no tile data.
    _tile_release();
}

}  // namespace anvil::kernels::detail
