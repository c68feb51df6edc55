// GGUF's block-quantized weight formats as llama.cpp lays them out, kept as the file holds them
// (WeightType::Q4_0, Q4_K, Q6_K): what each block's bytes mean, their exact values, and the
// quantizers the project's own GGUF writer uses.
//
//   Q4_0  32 values in 18 bytes: f16 d, then 16 bytes whose low nibbles are values 0-15 and high
//         nibbles values 16-31; value = d * (q - 8).
//   Q4_K  256 values in 144 bytes: f16 d, f16 dmin, 12 bytes holding eight 6-bit scales sc and
//         eight 6-bit mins m (one pair per 32 values), 128 bytes of nibbles: each run of 32 bytes
//         holds 64 values, the low nibbles the first 32 and the high nibbles the next;
//         value = d * sc * q - dmin * m.
//   Q6_K  256 values in 210 bytes: 128 bytes of low nibbles (ql), 64 bytes of high bit pairs (qh),
//         16 int8 scales (one per 16 values), f16 d; value = d * scale * (q - 32), q in 0..63. Each
//         half of 128 values takes 64 bytes of ql and 32 of qh: for l < 32, ql[l] holds values l
//         (low nibble) and l + 64 (high), ql[l + 32] values l + 32 and l + 96, and qh[l]'s bit pairs
//         from the bottom the high bits of l, l + 32, l + 64 and l + 96.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/weight_matrix.hpp"

namespace anvil::kernels {

constexpr int kQ4_0Values = 32;
constexpr int kQ4_0Bytes = 18;
// Q5_0: 32 values in 22 bytes: f16 d, 4 bytes whose bit j is value j's fifth bit, then Q4_0's 16
// bytes of nibbles; value = d * (q - 16). Its values and scale are exactly an int8 block with an f32
// scale: the engine holds it as q8.
constexpr int kQ5_0Bytes = 22;
constexpr int kSuperBlock = 256;  // QK_K: the values of one Q4_K or Q6_K block
constexpr int kQ4_KBytes = 144;
constexpr int kQ6_KBytes = 210;

// Bytes of one row of `cols` values; cols must be a multiple of the block's values.
inline size_t q4_0_row_bytes(int cols) { return size_t(cols / kQ4_0Values) * kQ4_0Bytes; }
inline size_t q5_0_row_bytes(int cols) { return size_t(cols / kQ4_0Values) * kQ5_0Bytes; }
// One Q5_0 block's values as int8 (q - 16) and its scale d.
inline float q5_0_block_to_int8(const uint8_t* block, int8_t out[32]) {
    uint32_t high;
    std::memcpy(&high, block + 2, 4);
    for (int j = 0; j < 16; ++j) {
        out[j] = int8_t(int((block[6 + j] & 0x0f) | (((high >> j) & 1) << 4)) - 16);
        out[j + 16] = int8_t(int((block[6 + j] >> 4) | (((high >> (j + 16)) & 1) << 4)) - 16);
    }
    uint16_t bits;
    std::memcpy(&bits, block, 2);
    return f16_to_f32(bits);
}
inline size_t q4_k_row_bytes(int cols) { return size_t(cols / kSuperBlock) * kQ4_KBytes; }
inline size_t q6_k_row_bytes(int cols) { return size_t(cols / kSuperBlock) * kQ6_KBytes; }

// Q4_K's twelve scale bytes as eight scales (bytes 0-7 of `out`) and eight mins (bytes 8-15).
// For j < 4: sc = s[j] & 63, m = s[j + 4] & 63; for j >= 4 the low four bits come from
// s[j + 4] (scale below, min above) and the top two from the top bits of s[j - 4] (scale) and
// s[j] (min). Done on 32-bit words, four values at a time.
inline void unpack_q4_k_scales(const uint8_t* s, uint8_t out[16]) {
    uint32_t u0, u1, u2;
    std::memcpy(&u0, s, 4);
    std::memcpy(&u1, s + 4, 4);
    std::memcpy(&u2, s + 8, 4);
    const uint32_t words[4] = {
        u0 & 0x3f3f3f3fu,
        (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4),
        u1 & 0x3f3f3f3fu,
        ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4),
    };
    std::memcpy(out, words, 16);
}

// Q4_K packed by 8 rows (WeightType::Q4_KPacked8), the layout the vector levels multiply: llama.cpp
// interleaves rows the same way for its repacked Q4_K. Rows are padded with zero rows to a multiple
// of 8; for each 8-row block and each super-block in turn, a tile of kQ4_KPacked8Bytes:
//   32 bytes   the 8 rows' d (f16), then their dmin
//   64 bytes   scales [sub-block j][row r], 6-bit values in bytes
//   64 bytes   mins [sub-block pair p][row r][2]: m[r][2p], m[r][2p + 1]
//   1024 bytes nibbles [64-value chunk c][step s][row r][4 bytes]: row r's bytes 4s..4s + 3 of chunk
//              c, whose low nibbles are values 64c + 4s.. and high nibbles 64c + 32 + 4s..
// The same values as the rows' blocks, nothing rounded: 1184 bytes where 8 blocks take 1152.
constexpr int kPack8Rows = 8;
constexpr int kQ4_KPacked8Bytes = 32 + 64 + 64 + 1024;
inline int pack8_blocks(int rows) { return (rows + kPack8Rows - 1) / kPack8Rows; }
inline size_t q4_k_packed8_bytes(int rows, int cols) {
    return size_t(pack8_blocks(rows)) * size_t(cols / kSuperBlock) * kQ4_KPacked8Bytes;
}
// Q6_K packed by 8 rows (WeightType::Q6_KPacked8) likewise, a tile of kQ6_KPacked8Bytes per 8-row
// block and super-block:
//   16 bytes   the 8 rows' d (f16)
//   128 bytes  scales [sub-block pair p][row r][2]: scale[r][2p], scale[r][2p + 1] (int8)
//   1536 bytes [half h][step s][ql A, ql B, qh][row r][4 bytes]: row r's ql bytes 64h + 4s.. (A) and
//              64h + 32 + 4s.. (B) and its qh bytes 32h + 4s.., which hold values 128h + 4s + 32k..
//              for k = 0..3 as a Q6_K block does (ggml_blocks.hpp's header).
// 8 blocks' bytes exactly.
constexpr int kQ6_KPacked8Bytes = 16 + 128 + 1536;
inline size_t q6_k_packed8_bytes(int rows, int cols) {
    return size_t(pack8_blocks(rows)) * size_t(cols / kSuperBlock) * kQ6_KPacked8Bytes;
}
void pack_q6_k_rows8(const uint8_t* blocks, int rows, int cols, uint8_t* out);
void dequantize_q6_k_packed8(const uint8_t* packed, int cols, int row, float* out);
// Q6_K packed by 8 rows for the AVX2 byte products (WeightType::Q6_KPacked8Avx2), in tiles of the
// same kQ6_KPacked8Bytes: the d and scale bytes as Q6_KPacked8's, then 16 groups of 96 bytes. Group g
// holds values 8e..8e + 7 (e = g % 2) of sub-blocks 2p and 2p + 1 (p = g / 2) as four registers'
// worth V0..V3 of [row r][4 bytes]; Vk's bytes for row r are the stored values (q + 32, 0..63) at
// 16(2p) + 8e + 2k, + 1, 16(2p + 1) + 8e + 2k, + 1. So vpmaddubsw sums one sub-block in a row's
// even int16 lane and the next in its odd one, which the pair's scale bytes as they lie multiply
// with no shuffle (the activations are reordered to match, matmul_avx2_blocks.cpp). V0..V2 are
// stored whole in the low 6 bits of the group's three 32-byte runs, and V3 two bits in the top of
// each (bits 0-1 in the first run's): 11 instructions unpack a group where Q6_K's nibbles and bit
// pairs took 17. The VNNI levels keep Q6_KPacked8, whose four values of a row in one dword are one
// sub-block's, as vpdpbusd needs.
void pack_q6_k_rows8_avx2(const uint8_t* blocks, int rows, int cols, uint8_t* out);
void dequantize_q6_k_packed8_avx2(const uint8_t* packed, int cols, int row, float* out);

// Q4_0 packed by 8 rows (WeightType::Q4_0Packed8), as llama.cpp repacks it: per 8-row block and
// block of 32 values, 16 bytes of the rows' d (f16), then [step s][row r][4 bytes]: row r's bytes
// 4s..4s + 3, whose low nibbles are values 4s.. and high nibbles 16 + 4s... 8 blocks' bytes exactly.
constexpr int kQ4_0Packed8Bytes = 16 + 128;
inline size_t q4_0_packed8_bytes(int rows, int cols) {
    return size_t(pack8_blocks(rows)) * size_t(cols / kQ4_0Values) * kQ4_0Packed8Bytes;
}
void pack_q4_0_rows8(const uint8_t* blocks, int rows, int cols, uint8_t* out);
void dequantize_q4_0_packed8(const uint8_t* packed, int cols, int row, float* out);

// Row-major Q4_K blocks (rows x cols) into that layout; `out` takes q4_k_packed8_bytes.
void pack_q4_k_rows8(const uint8_t* blocks, int rows, int cols, uint8_t* out);
// One row of a packed matrix back to its values.
void dequantize_q4_k_packed8(const uint8_t* packed, int cols, int row, float* out);

// `n` values (a multiple of the block's) from their blocks.
void dequantize_q4_0(const uint8_t* blocks, size_t n, float* out);
void dequantize_q5_0(const uint8_t* blocks, size_t n, float* out);
void dequantize_q4_k(const uint8_t* blocks, size_t n, float* out);
void dequantize_q6_k(const uint8_t* blocks, size_t n, float* out);

// Quantizers for the writer. Q4_0 is ggml's own rule (d = the value of largest magnitude / -8,
// q = min(15, truncate(x / d + 8.5))), so its bytes are llama-quantize's. Q4_K and Q6_K search
// each sub-block's scale (and Q4_K's min) for the least error weighted towards larger values, as
// llama-quantize does without an importance matrix, then round those to the super-block's 6- or
// 8-bit steps and round the values again against them; the search is the project's, so the bytes
// may differ from llama-quantize's while meaning the same format.
void quantize_q4_0(const float* x, size_t n, uint8_t* out);
// ggml's own rule: d = the value of largest magnitude / -16, q = min(31, truncate(x / d + 16.5)).
void quantize_q5_0(const float* x, size_t n, uint8_t* out);
void quantize_q4_k(const float* x, size_t n, uint8_t* out);
void quantize_q6_k(const float* x, size_t n, uint8_t* out);

}  // namespace anvil::kernels
