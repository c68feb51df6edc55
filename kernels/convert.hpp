// Conversions between weight and cache formats: load-time and KV-cache work, not per-token maths.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu_features.hpp"

namespace anvil::kernels {

// Uses the AVX-512 BF16 conversion instruction when the processor has it.
void f32_to_bf16_array(const float* in, uint16_t* out, size_t n);
void bf16_to_f32_array(const uint16_t* in, float* out, size_t n);
void f16_to_f32_array(const uint16_t* in, float* out, size_t n);

// One row into int8 with a scale per group of kQ8Group: scale = max|w| / 127 rounded to the nearest
// f16 (as GGUF's Q8_0 stores it, so that the packed layouts hold it exactly in two bytes), then
// q = round(w / scale). cols must be a multiple of kQ8Group; `scales` receives cols / kQ8Group floats.
void quantize_q8_row(const float* in, int cols, int8_t* out, float* scales);

// A Q8 matrix (int8 [rows][cols], scales [rows][cols / kQ8Group]) into the Q8Packed layout:
// `out` takes q8_packed_blocks(rows) * kQ8PackRows * cols bytes, `out_scales` that many / kQ8Group
// f16 scales; the padding rows are zeros. Throws std::invalid_argument for a scale f16 does not hold
// exactly (q8 not made by quantize_q8_row or from a GGUF file's f16 scales).
void pack_q8(const int8_t* q, const float* scales, int rows, int cols, uint8_t* out, uint16_t* out_scales);
// The same into the Q8Packed8 layout: q8_packed8_blocks(rows) * kQ8Pack8Rows * cols bytes.
void pack_q8_rows8(const int8_t* q, const float* scales, int rows, int cols, int8_t* out, uint16_t* out_scales);

namespace detail {
void f32_to_bf16_scalar(const float* in, uint16_t* out, size_t n);
void f32_to_bf16_avx512bf16(const float* in, uint16_t* out, size_t n);
}  // namespace detail

}  // namespace anvil::kernels
