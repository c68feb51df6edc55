#include "kernels/cpu_features.hpp"

#include <cstdlib>
#include <stdexcept>

namespace anvil::kernels {

const CpuFeatures& cpu_features() {
    static const CpuFeatures features = [] {
        CpuFeatures f;
        __builtin_cpu_init();
        f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        f.avx512 = f.avx2_fma && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
        f.avx512_vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
        // The levels are cumulative; every processor with AVX-512 BF16 so far has VNNI too.
        f.avx512_bf16 = f.avx512_vnni && __builtin_cpu_supports("avx512bf16");
        return f;
    }();
    return features;
}

Isa active_isa() {
    static const Isa isa = [] {
        const auto& f = cpu_features();
        Isa best = f.avx512_bf16   ? Isa::Avx512Bf16
                   : f.avx512_vnni ? Isa::Avx512Vnni
                   : f.avx512      ? Isa::Avx512
                   : f.avx2_fma    ? Isa::Avx2
                                   : Isa::Reference;
        const char* forced = std::getenv("ANVIL_KERNELS");
        if (!forced || !*forced) return best;
        std::string want = forced;
        Isa asked = want == "reference" ? Isa::Reference
                    : want == "avx2"    ? Isa::Avx2
                    : want == "avx512"  ? Isa::Avx512
                    : want == "avx512vnni" ? Isa::Avx512Vnni
                    : want == "avx512bf16" ? Isa::Avx512Bf16
                                        : throw std::runtime_error("ANVIL_KERNELS=" + want +
                                                                   ": expected reference, avx2, avx512, avx512vnni or avx512bf16");
        if (int(asked) > int(best))
            throw std::runtime_error("ANVIL_KERNELS=" + want + ": this processor offers at most " + isa_name(best));
        return asked;
    }();
    return isa;
}

std::string isa_name(Isa isa) {
    switch (isa) {
        case Isa::Reference: return "reference";
        case Isa::Avx2: return "avx2";
        case Isa::Avx512: return "avx512";
        case Isa::Avx512Vnni: return "avx512vnni";
        case Isa::Avx512Bf16: return "avx512bf16";
    }
    return "?";
}

}  // namespace anvil::kernels
