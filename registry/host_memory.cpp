#include "registry/host_memory.hpp"

#include <fstream>
#include <sstream>

#include "support/clock.hpp"

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
    v.observed_at = support::utc_now(support::Precision::seconds);
    return v;
}

}  // namespace anvil::registry
