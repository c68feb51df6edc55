// This host's physical memory: what the embedded engine (which computes on the CPU) must hold its
// weights and caches in. MemTotal of /proc/meminfo, as an evidence variable (measured).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "registry/evidence_variable.hpp"

namespace anvil::registry {

// MemTotal from the text of /proc/meminfo ("MemTotal:  16384 kB"), in bytes; nullopt when absent.
std::optional<std::int64_t> meminfo_total_bytes(std::string_view meminfo);

// Reads `path` (/proc/meminfo); nullopt when it cannot be read or has no MemTotal.
std::optional<EvidenceVariable> measure_host_memory(const std::string& path = "/proc/meminfo");

}  // namespace anvil::registry
