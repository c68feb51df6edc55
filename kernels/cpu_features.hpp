// Which instruction sets this processor offers, read once; ANVIL_KERNELS can force a lower level.
#pragma once

#include <string>

namespace anvil::kernels {

// In increasing order, each level adding to the one before. Every vector level multiplies q8
// weights by the activations rounded to int8; Avx512Vnni differs from Avx512 only in taking those
// products with the VNNI dot product, on weights packed for it (see matmul_avx512vnni.cpp);
// Avx512Bf16 adds the bf16 weights' products with the activations rounded to bf16 (see
// matmul_avx512bf16.cpp); Amx takes the batched products of packed q8 weights (prefill) with the AMX
// int8 tiles, bit for bit what the VNNI tiles give (see matmul_amx.cpp).
enum class Isa { Reference, Avx2, Avx512, Avx512Vnni, Avx512Bf16, Amx };

struct CpuFeatures {
    bool avx2_fma = false;
    bool avx512 = false;       // F + BW + VL + DQ
    bool avx512_vnni = false;  // the int8 dot product
    bool avx512_bf16 = false;  // the f32 -> bf16 conversion and the bf16 dot product
    bool amx_int8 = false;     // AMX tiles with the int8 dot product, and Linux's leave to use them
};

const CpuFeatures& cpu_features();
// The best level the processor offers, lowered by ANVIL_KERNELS=reference|avx2|avx512|
// avx512vnni|avx512bf16|amx.
Isa active_isa();
std::string isa_name(Isa isa);

}  // namespace anvil::kernels
