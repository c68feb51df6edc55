// Which instruction sets this processor offers, read once; ANVIL_KERNELS can force a lower level.
#pragma once

#include <string>

namespace anvil::kernels {

// In increasing order, each level adding to the one before. Every vector level multiplies q8
// weights by the activations rounded to int8; Avx512Vnni differs from Avx512 only in taking those
// products with the VNNI dot product, on weights packed for it (see matmul_avx512vnni.cpp);
// Avx512Bf16 adds the bf16 weights' products with the activations rounded to bf16 (see
// matmul_avx512bf16.cpp).
enum class Isa { Reference, Avx2, Avx512, Avx512Vnni, Avx512Bf16 };

struct CpuFeatures {
    bool avx2_fma = false;
    bool avx512 = false;       // F + BW + VL + DQ
    bool avx512_vnni = false;  // the int8 dot product
    bool avx512_bf16 = false;  // the f32 -> bf16 conversion and the bf16 dot product
};

const CpuFeatures& cpu_features();
// The best level the processor offers, lowered by ANVIL_KERNELS=reference|avx2|avx512|
// avx512vnni|avx512bf16.
Isa active_isa();
std::string isa_name(Isa isa);

}  // namespace anvil::kernels
