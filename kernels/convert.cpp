#include "kernels/convert.hpp"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/ggml_blocks.hpp"
#include "kernels/weight_matrix.hpp"

namespace anvil::kernels {

const char* weight_type_name(WeightType type) {
    switch (type) {
        case WeightType::F32: return "f32";
        case WeightType::BF16: return "bf16";
        case WeightType::F16: return "f16";
        case WeightType::Q8: return "q8";
        case WeightType::Q8Packed: return "q8 (packed)";
        case WeightType::Q8Packed8: return "q8 (packed by 8)";
        case WeightType::Q4_0: return "Q4_0";
        case WeightType::Q4_K: return "Q4_K";
        case WeightType::Q6_K: return "Q6_K";
        case WeightType::Q4_KPacked8: return "Q4_K (packed by 8)";
        case WeightType::Q6_KPacked8: return "Q6_K (packed by 8)";
        case WeightType::Q6_KPacked8Avx2: return "Q6_K (packed by 8 for AVX2)";
        case WeightType::Q4_0Packed8: return "Q4_0 (packed by 8)";
    }
    return "?";
}

uint16_t f32_to_f16(float value) {
    uint32_t x;
    std::memcpy(&x, &value, sizeof x);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t magnitude = x & 0x7fffffffu;
    if (magnitude > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
    if (magnitude >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds past 65504: infinity
    if (magnitude < 0x38800000u) {
        // A subnormal half (or zero): the value in units of 2^-24, rounded to nearest even.
        if (magnitude < 0x33000000u) return uint16_t(sign);
        const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
        const int shift = 126 - int(magnitude >> 23);  // 14 + (113 - exponent)
        const uint32_t halfway = 1u << (shift - 1);
        uint32_t r = mantissa >> shift;
        const uint32_t rest = mantissa & ((1u << shift) - 1);
        if (rest > halfway || (rest == halfway && (r & 1u))) ++r;
        return uint16_t(sign | r);
    }
    // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
    uint32_t h = ((magnitude >> 13) - ((127 - 15) << 10));
    const uint32_t rest = magnitude & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return uint16_t(sign | h);
}

float f16_to_f32(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu;
    uint32_t bits;
    if (exponent == 0x1f) {
        bits = sign | 0x7f800000u | (mantissa << 13);
    } else if (exponent != 0) {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    } else if (mantissa == 0) {
        bits = sign;
    } else {
        // Subnormal half: normalise into a float's wider exponent.
        exponent = 113;
        while ((mantissa & 0x400u) == 0) {
            mantissa <<= 1;
            --exponent;
        }
        bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

void dequantize_row(const WeightMatrix& w, int row, float* out) {
    const size_t offset = size_t(row) * w.cols;
    switch (w.type) {
        case WeightType::F32:
            std::memcpy(out, static_cast<const float*>(w.data) + offset, sizeof(float) * w.cols);
            return;
        case WeightType::BF16:
            bf16_to_f32_array(static_cast<const uint16_t*>(w.data) + offset, out, w.cols);
            return;
        case WeightType::F16:
            for (int k = 0; k < w.cols; ++k) out[k] = f16_to_f32(static_cast<const uint16_t*>(w.data)[offset + size_t(k)]);
            return;
        case WeightType::Q8: {
            const int8_t* q = static_cast<const int8_t*>(w.data) + offset;
            const int groups = w.cols / kQ8Group;
            for (int g = 0; g < groups; ++g) {
                const float scale = w.scales[size_t(row) * groups + g];
                for (int k = g * kQ8Group; k < (g + 1) * kQ8Group; ++k) out[k] = float(q[k]) * scale;
            }
            return;
        }
        case WeightType::Q8Packed: {
            const uint8_t* q = static_cast<const uint8_t*>(w.data);
            for (int k = 0; k < w.cols; ++k)
                out[k] = float(int(q[q8_packed_index(w.cols, row, k)]) - 128) *
                         f16_to_f32(w.scales_f16[q8_packed_scale_index(w.cols, row, k / kQ8Group)]);
            return;
        }
        case WeightType::Q8Packed8: {
            const int8_t* q = static_cast<const int8_t*>(w.data);
            for (int k = 0; k < w.cols; ++k)
                out[k] = float(q[q8_packed8_index(w.cols, row, k)]) * f16_to_f32(w.scales_f16[q8_packed8_scale_index(w.cols, row, k / kQ8Group)]);
            return;
        }
        case WeightType::Q4_0:
            dequantize_q4_0(static_cast<const uint8_t*>(w.data) + size_t(row) * q4_0_row_bytes(w.cols), size_t(w.cols), out);
            return;
        case WeightType::Q4_K:
            dequantize_q4_k(static_cast<const uint8_t*>(w.data) + size_t(row) * q4_k_row_bytes(w.cols), size_t(w.cols), out);
            return;
        case WeightType::Q6_K:
            dequantize_q6_k(static_cast<const uint8_t*>(w.data) + size_t(row) * q6_k_row_bytes(w.cols), size_t(w.cols), out);
            return;
        case WeightType::Q4_KPacked8: dequantize_q4_k_packed8(static_cast<const uint8_t*>(w.data), w.cols, row, out); return;
        case WeightType::Q6_KPacked8: dequantize_q6_k_packed8(static_cast<const uint8_t*>(w.data), w.cols, row, out); return;
        case WeightType::Q6_KPacked8Avx2: dequantize_q6_k_packed8_avx2(static_cast<const uint8_t*>(w.data), w.cols, row, out); return;
        case WeightType::Q4_0Packed8: dequantize_q4_0_packed8(static_cast<const uint8_t*>(w.data), w.cols, row, out); return;
    }
}

namespace {

// The q8 scales as the packed layouts hold them: checked first, outside the parallel loops, so
// that a scale f16 would round is an error and not a quietly different model.
std::vector<uint16_t> scales_as_f16(const float* scales, size_t n) {
    std::vector<uint16_t> half(n);
    for (size_t i = 0; i < n; ++i) {
        half[i] = f32_to_f16(scales[i]);
        if (!(f16_to_f32(half[i]) == scales[i]) && !std::isnan(scales[i]))
            throw std::invalid_argument("q8 scale " + std::to_string(scales[i]) + " (group " + std::to_string(i) +
                                        ") is not a value f16 holds: q8 is made by quantize_q8_row or from f16 scales");
    }
    return half;
}

}  // namespace

void pack_q8(const int8_t* q, const float* scales, int rows, int cols, uint8_t* out, uint16_t* out_scales) {
    const int blocks = q8_packed_blocks(rows);
    const int groups = cols / kQ8Group;
    const std::vector<uint16_t> half = scales_as_f16(scales, size_t(rows) * groups);
#pragma omp parallel for schedule(static)
    for (int b = 0; b < blocks; ++b)
        for (int i = 0; i < kQ8PackRows; ++i) {
            const int r = b * kQ8PackRows + i;
            for (int k = 0; k < cols; ++k)
                out[q8_packed_index(cols, r, k)] = uint8_t(128 + (r < rows ? int(q[size_t(r) * cols + k]) : 0));
            for (int g = 0; g < groups; ++g)
                out_scales[q8_packed_scale_index(cols, r, g)] = r < rows ? half[size_t(r) * groups + g] : uint16_t(0);
        }
}

void detail::f32_to_bf16_scalar(const float* in, uint16_t* out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}

void f32_to_bf16_array(const float* in, uint16_t* out, size_t n) {
    if (cpu_features().avx512_bf16 && int(active_isa()) >= int(Isa::Avx512)) return detail::f32_to_bf16_avx512bf16(in, out, n);
    detail::f32_to_bf16_scalar(in, out, n);
}

void bf16_to_f32_array(const uint16_t* in, float* out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
}

void f16_to_f32_array(const uint16_t* in, float* out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(in[i]);
}

void quantize_q8_row(const float* in, int cols, int8_t* out, float* scales) {
    for (int g = 0; g < cols / kQ8Group; ++g) {
        const float* block = in + g * kQ8Group;
        float largest = 0.0f;
        for (int k = 0; k < kQ8Group; ++k) largest = std::fmax(largest, std::fabs(block[k]));
        // Rounded to f16 before the values are (so that they are rounded against the scale they
        // will meet); the largest finite f16 bounds it, a value past 127 x 65504 is clamped.
        const float scale = f16_to_f32(f32_to_f16(std::fmin(largest / 127.0f, 65504.0f)));
        scales[g] = scale;
        const float inverse = scale > 0.0f ? 1.0f / scale : 0.0f;
        for (int k = 0; k < kQ8Group; ++k) {
            const long q = std::lrint(block[k] * inverse);
            out[g * kQ8Group + k] = int8_t(q > 127 ? 127 : q < -127 ? -127 : q);
        }
    }
}

void pack_q8_rows8(const int8_t* q, const float* scales, int rows, int cols, int8_t* out, uint16_t* out_scales) {
    const int blocks = q8_packed8_blocks(rows);
    const int groups = cols / kQ8Group;
    const std::vector<uint16_t> half = scales_as_f16(scales, size_t(rows) * groups);
#pragma omp parallel for schedule(static)
    for (int b = 0; b < blocks; ++b)
        for (int i = 0; i < kQ8Pack8Rows; ++i) {
            const int r = b * kQ8Pack8Rows + i;
            for (int k = 0; k < cols; ++k) out[q8_packed8_index(cols, r, k)] = r < rows ? q[size_t(r) * cols + k] : int8_t(0);
            for (int g = 0; g < groups; ++g)
                out_scales[q8_packed8_scale_index(cols, r, g)] = r < rows ? half[size_t(r) * groups + g] : uint16_t(0);
        }
}

}  // namespace anvil::kernels
