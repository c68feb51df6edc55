// What the benchmarks print beside their figures: the machine's load average (how far they can be
// trusted) and the median of repeated timings. The read bandwidth is in bench_bandwidth.hpp, for the
// benchmarks built with OpenMP.
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

// The middle value of a non-empty list (the mean of the two middle ones for an even count).
inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace anvil::bench
