// Which instruction sets this processor offers, read once; ANVIL_KERNELS can force a lower level.
#pragma once

#include <string>

namespace anvil::kernels {

// In increasing order. Avx512Bf16 differs from Avx512 only for bf16 weights, whose products it
// takes with the activations rounded to bf16 (see matmul_avx512bf16.cpp).
enum class Isa { Reference, Avx2, Avx512, Avx512Bf16 };

struct CpuFeatures {
    bool avx2_fma = false;
    bool avx512 = false;       // F + BW + VL + DQ
    bool avx512_bf16 = false;  // the f32 -> bf16 conversion and the bf16 dot product
};

const CpuFeatures& cpu_features();
// The best level the processor offers, lowered by ANVIL_KERNELS=reference|avx2|avx512|avx512bf16.
Isa active_isa();
std::string isa_name(Isa isa);

}  // namespace anvil::kernels
