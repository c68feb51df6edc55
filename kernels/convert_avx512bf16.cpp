// The hardware f32 -> bf16 conversion (round to nearest even, subnormals flushed, like the scalar
// path). Compiled with -mavx512bf16; called only when the processor has it.
#include <immintrin.h>

#include "kernels/convert.hpp"
#include "kernels/weight_matrix.hpp"

namespace anvil::kernels::detail {

void f32_to_bf16_avx512bf16(const float* in, uint16_t* out, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256bh packed = _mm512_cvtneps_pbh(_mm512_loadu_ps(in + i));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), reinterpret_cast<const __m256i&>(packed));
    }
    for (; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}

}  // namespace anvil::kernels::detail
