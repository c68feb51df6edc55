// What the block kernel files (matmul_avx2_blocks.cpp, matmul_vnni_blocks.cpp, matmul_amx.cpp)
// share: storing a packed block's 8 rows, the unpacking of a step of Q6_K's VNNI layout into its
// four quarters' values (the VNNI and AMX files; AVX2 has a layout of its own), and the items the
// products are split into. Everything is in an anonymous namespace on purpose: each file
// compiles its own copy with its own instruction set flags, so that no AVX-512 encoding of these
// reaches the AVX2 file through the linker's choice of one inline definition.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/ggml_blocks.hpp"
#include "kernels/matmul.hpp"

namespace anvil::kernels::detail {
namespace {

// One token's results for the 8 rows of a packed block from r0, the padding rows left out.
inline void store_rows8(__m256 sums, int rows, int r0, int t, float* y) {
    float* out = y + size_t(t) * rows + r0;
    const int live = std::min(kPack8Rows, rows - r0);
    if (live == kPack8Rows) {
        _mm256_storeu_ps(out, sums);
        return;
    }
    float lanes[kPack8Rows];
    _mm256_storeu_ps(lanes, sums);
    std::memcpy(out, lanes, sizeof(float) * size_t(live));
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// How far ahead in a packed block's stream of weights the kernels ask for bytes: from memory one
// thread's packed Q4_K matvec went from 7-9 GB/s (the next tile's bytes prefetched, two streams a
// tile) to 15-23 GB/s (one stream, 2 KB ahead), on the EPYC VM. And further ahead into L2 only: on
// the Intel VM (a 480 MB L3 that holds the bench model) the hardware prefetchers kept too few
// lines in flight, and the far requests took bench-model decode, 1 thread, Q4_K_M 218 -> 274
// tok/s, Q4_0 246 -> 334, Q6_K 121 -> 147 (AVX2 level).
constexpr int kPrefetchAhead = 2048;  // into L1; kPrefetchFar (matmul_tiling.hpp) into L2
// How far ahead into L1 the one-stream block tiles ask where the nearer distance starved them: Q6_K
// (both levels) and the VNNI level's Q4_K. Paired from memory on the Zen 5 VM (old and new kernels
// in one process, alternated every pass; a same-code control 0.96-1.04): Q6_K 1.07-1.34x over
// 1024-14336 columns, VNNI Q4_K 0.95-1.15x (median 1.07), where 2 KB was; and in bench_engine
// (old and new binaries alternated) Q6_K decode 1.20x at the VNNI level. Q4_0 lost 5-14% with it
// at long rows and AVX2's Q4_K gained nothing, so they keep kPrefetchAhead (but the VNNI level's
// one-token Q4_0 tile, which reads two blocks side by side (docs/PERFORMANCE.md, "Decode tiles"),
// gained 2-3% with it on the Intel VM and takes it);
// the packed q8 tiles keep kPrefetchNear (matmul_tiling.hpp; 4 and 8 KB gained in the
// paired harness, 0.69-1.00x in bench_engine). It is kPrefetchFar's distance, so the tiles that
// take it make only this request for a line: the L2 request for the same line as well (kept on
// the Zen 5 VM, where the VNNI Q6_K tiles with it gained 1.14-1.34x and 0.99-1.25x without)
// cost the Sapphire Rapids VM 3-8% a product from L3 (kernel_ab).
// docs/PERFORMANCE.md, "Prefetch distances".
constexpr int kPrefetchAheadDeep = 8192;
// Twice as far again, into L2, for a tile that takes kPrefetchAheadDeep into L1 and still waits on
// L3 (so far only AVX2's Q6_K): a request for a line that is still far ahead, so the L1 request
// finds it in L2. Not the same line at the same distance (which cost, "Prefetch distances"): the
// AVX2 Q6_K tile of 1 and 2 tokens from L3 on the Intel VM without BF16 gained 1.12-1.20x with it
// (kernel_ab, 1 and 2 threads; from memory 1.18x); tiles of 4 tokens, which wait less on memory,
// lost 2-3% and do without.
constexpr int kPrefetchFarDeep = 2 * kPrefetchAheadDeep;

// A Q6_KPacked8 step's 96 bytes (low nibbles of quarters 0 and 2, of quarters 1 and 3, then the
// high bit pairs of all four) as the four quarters' 6-bit values, 4 of each of 8 rows.
inline void q6_k_step_values(const uint8_t* at, __m256i q[4]) {
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const __m256i bits45 = _mm256_set1_epi8(0x30);
    const __m256i a = load256(at), b = load256(at + 32), hb = load256(at + 64);
    q[0] = _mm256_or_si256(_mm256_and_si256(a, low4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), bits45));
    q[1] = _mm256_or_si256(_mm256_and_si256(b, low4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), bits45));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), low4), _mm256_and_si256(hb, bits45));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), low4), _mm256_and_si256(_mm256_srli_epi16(hb, 2), bits45));
}

// Items of two 8-row blocks, each taken `Wide` tokens a tile and the leftover tokens one at a
// time: a token's sums are in the same order in either tile, so its result does not depend on
// the batch. A leftover token takes both blocks of an item at once where the kernel has such a
// tile (TilePair; TileOne for an item's lone last block).
template <typename Input, int Wide, void (*TileWide)(const WeightMatrix&, int, const Input*, int, float*),
          void (*TileOne)(const WeightMatrix&, int, const Input*, int, float*),
          void (*TilePair)(const WeightMatrix&, int, const Input*, int, float*)>
void packed8_item_paired(const WeightMatrix& w, int item, const Input* x, int c0, int c1, float* y) {
    const int b0 = item * 2;
    const int blocks = std::min(2, pack8_blocks(w.rows) - b0);
    const int lone = c0 + (c1 - c0) / Wide * Wide;  // the first token after the wide tiles
    for (int b = b0; b < b0 + blocks; ++b)
        for (int t = c0; t < lone; t += Wide) TileWide(w, b, x, t, y);
    for (int t = lone; t < c1; ++t) {
        if (blocks == 2) TilePair(w, b0, x, t, y);
        else TileOne(w, b0, x, t, y);
    }
}

// The one-block tile on each block of a pair in turn, for kernels without a pair tile.
template <typename Input, void (*TileOne)(const WeightMatrix&, int, const Input*, int, float*)>
void each_of_pair(const WeightMatrix& w, int b0, const Input* x, int t, float* y) {
    TileOne(w, b0, x, t, y);
    TileOne(w, b0 + 1, x, t, y);
}

// An item four tokens a tile wherever four are left, where a kernel's four-token tile spills but
// still gains (Q6_K: docs/PERFORMANCE.md, "Tiles of several tokens"); two or three left over take
// the two-token tile, a lone token TileOne or TilePair, as packed8_item_paired does.
template <typename Input, void (*TileFour)(const WeightMatrix&, int, const Input*, int, float*),
          void (*TileTwo)(const WeightMatrix&, int, const Input*, int, float*),
          void (*TileOne)(const WeightMatrix&, int, const Input*, int, float*),
          void (*TilePair)(const WeightMatrix&, int, const Input*, int, float*)>
void packed8_item_four_two(const WeightMatrix& w, int item, const Input* x, int c0, int c1, float* y) {
    const int four_end = c0 + (c1 - c0) / 4 * 4;
    if (four_end > c0) packed8_item_paired<Input, 4, TileFour, TileOne, TilePair>(w, item, x, c0, four_end, y);
    packed8_item_paired<Input, 2, TileTwo, TileOne, TilePair>(w, item, x, four_end, c1, y);
}

template <typename Input, int Wide, void (*TileWide)(const WeightMatrix&, int, const Input*, int, float*),
          void (*TileOne)(const WeightMatrix&, int, const Input*, int, float*)>
void packed8_item(const WeightMatrix& w, int item, const Input* x, int c0, int c1, float* y) {
    packed8_item_paired<Input, Wide, TileWide, TileOne, each_of_pair<Input, TileOne>>(w, item, x, c0, c1, y);
}

inline int packed8_items(const WeightMatrix& w) { return (pack8_blocks(w.rows) + 1) / 2; }

}  // namespace
}  // namespace anvil::kernels::detail
