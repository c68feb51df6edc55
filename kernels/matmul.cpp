#include "kernels/matmul.hpp"

#include <stdexcept>
#include <string>

namespace anvil::kernels {

void matmul_group_with(Isa isa, const WeightMatrix* ws, float* const* ys, int count, const float* x, int n_tokens) {
    if (count < 1 || count > kMaxMatmulGroup) throw std::logic_error("matmul group of " + std::to_string(count));
    bool uniform = true;
    for (int i = 0; i < count; ++i) {
        if (ws[i].type == WeightType::Q8 && ws[i].cols % kQ8Group != 0)
            throw std::logic_error("q8 matrix with " + std::to_string(ws[i].cols) + " columns, not a multiple of the group");
        uniform = uniform && ws[i].type == ws[0].type && ws[i].cols == ws[0].cols;
    }
    if (!uniform || isa == Isa::Reference) {
        for (int i = 0; i < count; ++i) {
            if (isa == Isa::Reference) detail::matmul_reference(ws[i], x, n_tokens, ys[i]);
            else matmul_group_with(isa, ws + i, ys + i, 1, x, n_tokens);
        }
        return;
    }
    switch (isa) {
        case Isa::Reference: break;
        case Isa::Avx2:
            if (!cpu_features().avx2_fma) throw std::runtime_error("this processor lacks AVX2/FMA");
            return detail::matmul_avx2(ws, ys, count, x, n_tokens);
        case Isa::Avx512:
            if (!cpu_features().avx512) throw std::runtime_error("this processor lacks AVX-512");
            return detail::matmul_avx512(ws, ys, count, x, n_tokens);
    }
}

void matmul_with(Isa isa, const WeightMatrix& w, const float* x, int n_tokens, float* y) {
    matmul_group_with(isa, &w, &y, 1, x, n_tokens);
}

void matmul(const WeightMatrix& w, const float* x, int n_tokens, float* y) {
    matmul_group_with(active_isa(), &w, &y, 1, x, n_tokens);
}

void matmul_group(const WeightMatrix* ws, float* const* ys, int count, const float* x, int n_tokens) {
    matmul_group_with(active_isa(), ws, ys, count, x, n_tokens);
}

}  // namespace anvil::kernels
