// What the benchmarks print beside their figures: the machine's load average (how far they can be
// trusted), the processor and its flags, and the median of repeated timings. The read bandwidth is
// in bench_bandwidth.hpp, for the benchmarks built with OpenMP.
#pragma once

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

namespace anvil::bench {

// The 1, 5 and 15 minute load averages as /proc/loadavg gives them.
inline std::string load_average() {
    std::ifstream in("/proc/loadavg");
    std::string a, b, c;
    in >> a >> b >> c;
    return in ? a + " " + b + " " + c : std::string("?");
}

// The processor's name and those of its flags that choose a kernel level (and avx_vnni, which a
// 256-bit VNNI level would take), as /proc/cpuinfo gives them ("?" where it cannot be read): every
// figure in docs/PERFORMANCE.md names the flags it was measured with, and the same level can run on
// processors that differ in them.
inline std::string cpu_description() {
    static const char* const kLevelFlags[] = {"avx2",        "fma",         "f16c",     "avx512f",  "avx512bw", "avx512vl",
                                              "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16"};
    std::ifstream in("/proc/cpuinfo");
    std::string line, name, flags;
    while ((name.empty() || flags.empty()) && std::getline(in, line)) {
        const size_t colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string value = line.substr(colon + 1);
        value.erase(0, value.find_first_not_of(" \t"));
        if (name.empty() && line.rfind("model name", 0) == 0) {
            name = value;
        } else if (flags.empty() && line.rfind("flags", 0) == 0) {
            const std::string words = " " + value + " ";
            for (const char* flag : kLevelFlags)
                if (words.find(" " + std::string(flag) + " ") != std::string::npos) flags += (flags.empty() ? "" : " ") + std::string(flag);
            if (flags.empty()) flags = "none that choose a kernel level";
        }
    }
    return (name.empty() ? std::string("?") : name) + ", flags: " + (flags.empty() ? std::string("?") : flags);
}

// The middle value of a non-empty list (the mean of the two middle ones for an even count).
inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace anvil::bench
