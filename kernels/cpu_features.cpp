#include "kernels/cpu_features.hpp"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

namespace anvil::kernels {
namespace {

// AMX needs the processor's tiles (CPUID leaf 7: EDX bit 24 tiles, bit 25 int8), the OS saving
// their state (XCR0 bits 17 and 18), and Linux's leave for this process (5.16 on: the tile data
// is 8 KB more in every context switch and signal frame, so a process asks before its first use).
bool amx_int8_usable() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!(d & (1u << 24)) || !(d & (1u << 25))) return false;
    __get_cpuid(1, &a, &b, &c, &d);
    if (!(c & (1u << 27))) return false;  // OSXSAVE: xgetbv is there
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

}  // namespace

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
        // Likewise every processor with AMX so far has AVX-512 BF16.
        f.amx_int8 = f.avx512_bf16 && amx_int8_usable();
        return f;
    }();
    return features;
}

Isa active_isa() {
    static const Isa isa = [] {
        const auto& f = cpu_features();
        Isa best = f.amx_int8      ? Isa::Amx
                   : f.avx512_bf16 ? Isa::Avx512Bf16
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
                    : want == "amx"     ? Isa::Amx
                                        : throw std::runtime_error("ANVIL_KERNELS=" + want +
                                                                   ": expected reference, avx2, avx512, avx512vnni, avx512bf16 or amx");
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
        case Isa::Amx: return "amx";
    }
    return "?";
}

}  // namespace anvil::kernels
