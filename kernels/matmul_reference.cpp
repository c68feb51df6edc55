// The plain product every vector kernel is checked against: one row, one token, in order.
#include <cstdint>

#include "kernels/matmul.hpp"

namespace anvil::kernels::detail {

void matmul_reference(const WeightMatrix& w, const float* x, int n_tokens, float* y) {
    const int groups = w.type == WeightType::Q8 ? w.cols / kQ8Group : 0;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < w.rows; ++r) {
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
                case WeightType::Q8: {
                    const int8_t* row = static_cast<const int8_t*>(w.data) + size_t(r) * w.cols;
                    for (int g = 0; g < groups; ++g) {
                        float part = 0.0f;
                        for (int k = g * kQ8Group; k < (g + 1) * kQ8Group; ++k) part += float(row[k]) * xt[k];
                        sum += part * w.scales[size_t(r) * groups + g];
                    }
                    break;
                }
            }
            y[size_t(t) * w.rows + r] = sum;
        }
    }
}

}  // namespace anvil::kernels::detail
