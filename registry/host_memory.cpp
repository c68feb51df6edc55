#include "registry/host_memory.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

namespace anvil::registry {

std::optional<std::int64_t> meminfo_total_bytes(std::string_view meminfo) {
    std::istringstream in{std::string(meminfo)};
    std::string line;
    while (std::getline(in, line)) {
        if (!line.starts_with("MemTotal:")) continue;
        std::istringstream fields(line.substr(9));
        std::int64_t kib = 0;
        std::string unit;
        // The kernel writes kB and means KiB.
        if (fields >> kib >> unit && unit == "kB" && kib > 0 && kib < (std::int64_t{1} << 52)) return kib * 1024;
        return std::nullopt;
    }
    return std::nullopt;
}

std::optional<EvidenceVariable> measure_host_memory(const std::string& path) {
    std::ifstream in(path);
    if (!in) return std::nullopt;
    std::stringstream text;
    text << in.rdbuf();
    const auto bytes = meminfo_total_bytes(text.str());
    if (!bytes) return std::nullopt;
    EvidenceVariable v;
    v.value = Number{*bytes};
    v.unit = "bytes";
    v.status = EvidenceStatus::measured;
    v.source = path + " MemTotal";
    const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm utc{};
    gmtime_r(&now, &utc);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &utc);
    v.observed_at = stamp;
    return v;
}

}  // namespace anvil::registry
