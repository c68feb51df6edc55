// The machine's load average, printed beside a benchmark's figures: how far they can be trusted.
// The read bandwidth is in bench_bandwidth.hpp, for the benchmarks built with OpenMP.
#pragma once

#include <fstream>
#include <string>

namespace anvil::bench {

// The 1, 5 and 15 minute load averages as /proc/loadavg gives them.
inline std::string load_average() {
    std::ifstream in("/proc/loadavg");
    std::string a, b, c;
    in >> a >> b >> c;
    return in ? a + " " + b + " " + c : std::string("?");
}

}  // namespace anvil::bench
