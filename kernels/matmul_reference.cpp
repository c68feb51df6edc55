// The plain product every vector kernel is checked against: one row, one token, in order.
#include <cstdint>
#include <vector>

#include "kernels/matmul.hpp"
#include "kernels/team.hpp"

namespace anvil::kernels::detail {

void matmul_reference(const WeightMatrix& w, const float* x, int n_tokens, float* y) {
    const int groups = w.cols / kQ8Group;
    share_items(true, w.rows, 16, [&](int r) {
        // GGUF blocks: the row's exact values, then the plain product.
        thread_local std::vector<float> values;
        if (is_ggml_block_type(w.type)) {
            values.resize(size_t(w.cols));
            dequantize_row(w, r, values.data());
        }
        for (int t = 0; t < n_tokens; ++t) {
            const float* xt = x + size_t(t) * w.cols;
            float sum = 0.0f;
            switch (w.type) {
                case WeightType::F32: {
                    const float* row = static_cast<const float*>(w.data) + size_t(r) * w.cols;
                    for (int k = 0; k < w.cols; ++k) sum += row[k] * xt[k];
                    break;
                }
                case WeightType::BF16: {
                    const uint16_t* row = static_cast<const uint16_t*>(w.data) + size_t(r) * w.cols;
                    for (int k = 0; k < w.cols; ++k) sum += bf16_to_f32(row[k]) * xt[k];
                    break;
                }
                case WeightType::F16: {
                    const uint16_t* row = static_cast<const uint16_t*>(w.data) + size_t(r) * w.cols;
                    for (int k = 0; k < w.cols; ++k) sum += f16_to_f32(row[k]) * xt[k];
                    break;
                }
                case WeightType::Q8: {
                    const int8_t* row = static_cast<const int8_t*>(w.data) + size_t(r) * w.cols;
                    for (int g = 0; g < groups; ++g) {
                        float part = 0.0f;
                        for (int k = g * kQ8Group; k < (g + 1) * kQ8Group; ++k) part += float(row[k]) * xt[k];
                        sum += part * w.scales[size_t(r) * groups + g];
                    }
                    break;
                }
                case WeightType::Q8Packed: {
                    const uint8_t* q = static_cast<const uint8_t*>(w.data);
                    for (int g = 0; g < groups; ++g) {
                        float part = 0.0f;
                        for (int k = g * kQ8Group; k < (g + 1) * kQ8Group; ++k)
                            part += float(int(q[q8_packed_index(w.cols, r, k)]) - 128) * xt[k];
                        sum += part * f16_to_f32(w.scales_f16[q8_packed_scale_index(w.cols, r, g)]);
                    }
                    break;
                }
                case WeightType::Q4_0:
                case WeightType::Q4_K:
                case WeightType::Q6_K:
                case WeightType::Q4_KPacked8:
                case WeightType::Q6_KPacked8:
                case WeightType::Q4_0Packed8:
                case WeightType::Q6_KPacked8Avx2:
                    for (int k = 0; k < w.cols; ++k) sum += values[size_t(k)] * xt[k];
                    break;
                case WeightType::Q8Packed8: {
                    const int8_t* q = static_cast<const int8_t*>(w.data);
                    for (int g = 0; g < groups; ++g) {
                        float part = 0.0f;
                        for (int k = g * kQ8Group; k < (g + 1) * kQ8Group; ++k) part += float(q[q8_packed8_index(w.cols, r, k)]) * xt[k];
                        sum += part * f16_to_f32(w.scales_f16[q8_packed8_scale_index(w.cols, r, g)]);
                    }
                    break;
                }
            }
            y[size_t(t) * w.rows + r] = sum;
        }
    });
}

}  // namespace anvil::kernels::detail
