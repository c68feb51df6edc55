// The weight formats the kernels multiply with, and the scalar conversions every format shares.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace anvil::kernels {

// F16 is IEEE half precision as Hugging Face and GGUF files store it (widened to f32 in registers).
// Q4_0, Q4_K and Q6_K are GGUF's blocks as the file holds them, row after row; Q4_KPacked8,
// Q6_KPacked8 and Q4_0Packed8 the same values interleaved by 8 rows for the vector levels, and
// Q6_KPacked8Avx2 Q6_K's laid out for the AVX2 byte products instead (ggml_blocks.hpp). New types go
// last: tests/bench/kernel_ab.sh links a baseline revision's kernels, compiled with its own enum.
enum class WeightType { F32, BF16, F16, Q8, Q8Packed, Q8Packed8, Q4_0, Q4_K, Q6_K, Q4_KPacked8, Q6_KPacked8, Q4_0Packed8, Q6_KPacked8Avx2 };
const char* weight_type_name(WeightType type);

// Q8 keeps int8 weights with one f32 scale per group of kQ8Group consecutive inputs of a row.
constexpr int kQ8Group = 32;

// Q8Packed holds the same values as Q8 laid out for the AVX-512 VNNI product, which then multiplies
// 16 rows by 4 inputs per instruction and applies the scales once per group of 16 rows: blocks of
// kQ8PackRows rows (the last padded with zeros), and within a block, for each run of 4 columns,
// the 16 rows' 4 values in turn (64 bytes), each stored + 128 as an unsigned byte. Its scales are
// [blocks][cols / kQ8Group][kQ8PackRows] in f16 (`scales_f16`), as GGUF's Q8_0 holds them: a weight
// then takes 1.0625 bytes, not 1.125, and decode reads that much less. Exact, since every q8 scale
// is a value f16 holds (quantize_q8_row rounds them so). Made from a Q8 matrix by pack_q8 (convert.hpp).
constexpr int kQ8PackRows = 16;
inline size_t q8_packed_index(int cols, int row, int col) {
    return (size_t(row / kQ8PackRows) * size_t(cols / 4) + size_t(col / 4)) * (kQ8PackRows * 4) +
           size_t(row % kQ8PackRows) * 4 + size_t(col % 4);
}
inline size_t q8_packed_scale_index(int cols, int row, int group) {
    return (size_t(row / kQ8PackRows) * size_t(cols / kQ8Group) + size_t(group)) * kQ8PackRows + size_t(row % kQ8PackRows);
}
inline int q8_packed_blocks(int rows) { return (rows + kQ8PackRows - 1) / kQ8PackRows; }

// Q8Packed8 holds Q8's values laid out for the AVX2 byte products (matmul_avx2_packed.cpp), which
// then multiply 8 rows by 4 inputs per instruction and apply the scales once per group of 8 rows:
// blocks of kQ8Pack8Rows rows (the last padded with zeros), and within a block, for each run of 4
// columns, the 8 rows' 4 values in turn (32 bytes), signed. Its scales are
// [blocks][cols / kQ8Group][kQ8Pack8Rows] in f16 (`scales_f16`), as Q8Packed's. Made from a Q8 matrix
// by pack_q8_rows8 (convert.hpp).
constexpr int kQ8Pack8Rows = 8;
inline size_t q8_packed8_index(int cols, int row, int col) {
    return (size_t(row / kQ8Pack8Rows) * size_t(cols / 4) + size_t(col / 4)) * (kQ8Pack8Rows * 4) +
           size_t(row % kQ8Pack8Rows) * 4 + size_t(col % 4);
}
inline size_t q8_packed8_scale_index(int cols, int row, int group) {
    return (size_t(row / kQ8Pack8Rows) * size_t(cols / kQ8Group) + size_t(group)) * kQ8Pack8Rows + size_t(row % kQ8Pack8Rows);
}
inline int q8_packed8_blocks(int rows) { return (rows + kQ8Pack8Rows - 1) / kQ8Pack8Rows; }

// A [rows][cols] matrix: row-major but for Q8Packed and Q8Packed8. `data` holds floats, bf16 bits, int8 or
// GGUF blocks by `type`; `scales` only for Q8 and `scales_f16` only for the packed q8 types (the GGUF
// blocks carry their own). The memory belongs to the weights that made the view.
struct WeightMatrix {
    WeightType type = WeightType::F32;
    int rows = 0;
    int cols = 0;
    const void* data = nullptr;
    const float* scales = nullptr;
    const uint16_t* scales_f16 = nullptr;
};

// Q4_K and Q6_K rows are whole super-blocks of 256 values, Q4_0 rows whole blocks of 32.
inline bool is_ggml_block_type(WeightType type) {
    return type == WeightType::Q4_0 || type == WeightType::Q4_K || type == WeightType::Q6_K || type == WeightType::Q4_KPacked8 ||
           type == WeightType::Q6_KPacked8 || type == WeightType::Q4_0Packed8 || type == WeightType::Q6_KPacked8Avx2;
}
inline int ggml_block_values(WeightType type) {
    return type == WeightType::Q4_0 || type == WeightType::Q4_0Packed8 ? 32 : 256;
}

inline float bf16_to_f32(uint16_t bits) {
    uint32_t wide = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &wide, sizeof f);
    return f;
}

// Round to nearest even, as torch does; NaN stays NaN. Subnormals flush to zero so that the
// scalar path and the AVX-512 BF16 instruction (which flushes them) give the same bits.
inline uint16_t f32_to_bf16(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
    if ((bits & 0x7f800000u) == 0) return uint16_t((bits >> 16) & 0x8000);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return uint16_t(bits >> 16);
}

float f16_to_f32(uint16_t bits);
// Round to nearest even; overflow to infinity, NaN stays NaN (as numpy's astype(float16)).
uint16_t f32_to_f16(float value);

// Dequantizes one row of any format into `out` (cols floats): the embedding lookup.
void dequantize_row(const WeightMatrix& w, int row, float* out);

}  // namespace anvil::kernels
