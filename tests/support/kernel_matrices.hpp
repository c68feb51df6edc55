// Random inputs for kernel checks: vectors, and weight matrices of every format together with the
// exact values their bytes stand for (what a kernel must multiply with), shared by the CPU and the
// CUDA kernel tests so both are checked against the same construction.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/convert.hpp"
#include "kernels/ggml_blocks.hpp"
#include "kernels/matmul.hpp"
#include "kernels/weight_matrix.hpp"

namespace anvil::test {

inline std::vector<float> random_vector(std::size_t n, std::uint32_t seed, float spread = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-spread, spread);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

// A matrix of one type that owns its bytes; `view` points into them.
struct TestMatrix {
    kernels::WeightMatrix view;
    std::vector<float> f32;
    std::vector<std::uint16_t> bf16;
    std::vector<std::int8_t> q8;
    std::vector<float> scales;
    std::vector<std::uint16_t> scales_f16;  // the packed q8 types' scales
    std::vector<std::uint8_t> packed;  // Q8Packed: q8 packed; GGUF blocks: their bytes
                                       // (Q8Packed8 packs into q8 itself)
    std::vector<double> exact;  // [rows][cols] the values the kernel multiplies with
};

inline TestMatrix make_matrix(kernels::WeightType type, int rows, int cols, std::uint32_t seed) {
    using namespace kernels;
    TestMatrix m;
    const auto values = random_vector(std::size_t(rows) * cols, seed);
    m.exact.resize(values.size());
    m.view = {type, rows, cols, nullptr, nullptr};
    switch (type) {
        case WeightType::F32:
            m.f32 = values;
            m.view.data = m.f32.data();
            break;
        case WeightType::BF16:
            m.bf16.resize(values.size());
            detail::f32_to_bf16_scalar(values.data(), m.bf16.data(), values.size());
            m.view.data = m.bf16.data();
            break;
        case WeightType::F16:
            m.bf16.resize(values.size());  // two bytes a value, as bf16's
            for (std::size_t i = 0; i < values.size(); ++i) m.bf16[i] = f32_to_f16(values[i]);
            m.view.data = m.bf16.data();
            break;
        case WeightType::Q8:
            m.q8.resize(values.size());
            m.scales.resize(values.size() / kQ8Group);
            for (int r = 0; r < rows; ++r)
                quantize_q8_row(&values[std::size_t(r) * cols], cols, &m.q8[std::size_t(r) * cols], &m.scales[std::size_t(r) * cols / kQ8Group]);
            m.view.data = m.q8.data();
            m.view.scales = m.scales.data();
            break;
        case WeightType::Q8Packed: {
            m.q8.resize(values.size());
            std::vector<float> row_scales(values.size() / kQ8Group);
            for (int r = 0; r < rows; ++r)
                quantize_q8_row(&values[std::size_t(r) * cols], cols, &m.q8[std::size_t(r) * cols], &row_scales[std::size_t(r) * cols / kQ8Group]);
            const std::size_t padded = std::size_t(q8_packed_blocks(rows)) * kQ8PackRows * cols;
            m.packed.resize(padded);
            m.scales_f16.resize(padded / kQ8Group);
            pack_q8(m.q8.data(), row_scales.data(), rows, cols, m.packed.data(), m.scales_f16.data());
            m.view.data = m.packed.data();
            m.view.scales_f16 = m.scales_f16.data();
            break;
        }
        case WeightType::Q8Packed8: {
            std::vector<std::int8_t> row_major(values.size());
            std::vector<float> row_scales(values.size() / kQ8Group);
            for (int r = 0; r < rows; ++r)
                quantize_q8_row(&values[std::size_t(r) * cols], cols, &row_major[std::size_t(r) * cols], &row_scales[std::size_t(r) * cols / kQ8Group]);
            const std::size_t padded = std::size_t(q8_packed8_blocks(rows)) * kQ8Pack8Rows * cols;
            m.q8.resize(padded);
            m.scales_f16.resize(padded / kQ8Group);
            pack_q8_rows8(row_major.data(), row_scales.data(), rows, cols, m.q8.data(), m.scales_f16.data());
            m.view.data = m.q8.data();
            m.view.scales_f16 = m.scales_f16.data();
            break;
        }
        case WeightType::Q4_0:
        case WeightType::Q4_K:
        case WeightType::Q6_K: {
            // The project's quantizers write the blocks a GGUF file would hold.
            const std::size_t row_bytes = type == WeightType::Q4_0 ? q4_0_row_bytes(cols)
                                          : type == WeightType::Q4_K ? q4_k_row_bytes(cols)
                                                                     : q6_k_row_bytes(cols);
            m.packed.resize(row_bytes * std::size_t(rows));
            for (int r = 0; r < rows; ++r) {
                const float* in = &values[std::size_t(r) * cols];
                std::uint8_t* out = &m.packed[std::size_t(r) * row_bytes];
                if (type == WeightType::Q4_0) quantize_q4_0(in, std::size_t(cols), out);
                else if (type == WeightType::Q4_K) quantize_q4_k(in, std::size_t(cols), out);
                else quantize_q6_k(in, std::size_t(cols), out);
            }
            m.view.data = m.packed.data();
            break;
        }
        case WeightType::Q4_0Packed8: {
            std::vector<std::uint8_t> row_major(q4_0_row_bytes(cols) * std::size_t(rows));
            for (int r = 0; r < rows; ++r)
                quantize_q4_0(&values[std::size_t(r) * cols], std::size_t(cols), &row_major[q4_0_row_bytes(cols) * std::size_t(r)]);
            m.packed.resize(q4_0_packed8_bytes(rows, cols));
            pack_q4_0_rows8(row_major.data(), rows, cols, m.packed.data());
            m.view.data = m.packed.data();
            break;
        }
        case WeightType::Q4_KPacked8:
        case WeightType::Q6_KPacked8:
        case WeightType::Q6_KPacked8Avx2: {
            const bool q4 = type == WeightType::Q4_KPacked8;
            const std::size_t row_bytes = q4 ? q4_k_row_bytes(cols) : q6_k_row_bytes(cols);
            std::vector<std::uint8_t> row_major(row_bytes * std::size_t(rows));
            for (int r = 0; r < rows; ++r) {
                if (q4) quantize_q4_k(&values[std::size_t(r) * cols], std::size_t(cols), &row_major[row_bytes * std::size_t(r)]);
                else quantize_q6_k(&values[std::size_t(r) * cols], std::size_t(cols), &row_major[row_bytes * std::size_t(r)]);
            }
            m.packed.resize(q4 ? q4_k_packed8_bytes(rows, cols) : q6_k_packed8_bytes(rows, cols));
            if (q4) pack_q4_k_rows8(row_major.data(), rows, cols, m.packed.data());
            else if (type == WeightType::Q6_KPacked8) pack_q6_k_rows8(row_major.data(), rows, cols, m.packed.data());
            else pack_q6_k_rows8_avx2(row_major.data(), rows, cols, m.packed.data());
            m.view.data = m.packed.data();
            break;
        }
    }
    std::vector<float> row(static_cast<std::size_t>(cols));
    for (int r = 0; r < rows; ++r) {
        dequantize_row(m.view, r, row.data());
        for (int k = 0; k < cols; ++k) m.exact[std::size_t(r) * cols + k] = row[std::size_t(k)];
    }
    return m;
}

}  // namespace anvil::test
