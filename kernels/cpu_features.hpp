// Which instruction sets this processor offers, read once; ANVIL_KERNELS can force a lower level.
#pragma once

#include <string>

namespace anvil::kernels {

enum class Isa { Reference, Avx2, Avx512 };

struct CpuFeatures {
    bool avx2_fma = false;
    bool avx512 = false;       // F + BW + VL + DQ
    bool avx512_bf16 = false;  // the hardware f32 -> bf16 conversion
};

const CpuFeatures& cpu_features();
// The best level the processor offers, lowered by ANVIL_KERNELS=reference|avx2|avx512.
Isa active_isa();
std::string isa_name(Isa isa);

}  // namespace anvil::kernels
