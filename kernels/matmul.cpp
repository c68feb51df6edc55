#include "kernels/matmul.hpp"

#include <stdexcept>
#include <string>

namespace anvil::kernels {

void matmul_with(Isa isa, const WeightMatrix& w, const float* x, int n_tokens, float* y) {
    if (w.type == WeightType::Q8 && w.cols % kQ8Group != 0)
        throw std::logic_error("q8 matrix with " + std::to_string(w.cols) + " columns, not a multiple of the group");
    switch (isa) {
        case Isa::Reference: return detail::matmul_reference(w, x, n_tokens, y);
        case Isa::Avx2:
            if (!cpu_features().avx2_fma) throw std::runtime_error("this processor lacks AVX2/FMA");
            return detail::matmul_avx2(w, x, n_tokens, y);
        case Isa::Avx512:
            if (!cpu_features().avx512) throw std::runtime_error("this processor lacks AVX-512");
            return detail::matmul_avx512(w, x, n_tokens, y);
    }
}

void matmul(const WeightMatrix& w, const float* x, int n_tokens, float* y) {
    matmul_with(active_isa(), w, x, n_tokens, y);
}

}  // namespace anvil::kernels
