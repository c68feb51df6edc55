// The speed and memory measurements of a qualification run (evidence class local, status
// measured). A measurement that could not be taken is left out, never reported as zero, so the
// promotion policy sees it as missing and holds.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "daemon/qualify/run_context.hpp"

namespace anvil::qualify::detail {

// ttft_seconds, prefill_tokens_per_second, decode_tokens_per_second_c1 and _cN, warm_e2e_seconds,
// tasks_per_hour.
std::vector<Measurement> measure_speed(RunContext& run);

// The sum of VmHWM (peak resident set) over `pid` and every process descending from it, from
// /proc; nullopt when `pid` has no readable /proc entry.
std::optional<std::uint64_t> process_tree_peak_bytes(int pid);

}  // namespace anvil::qualify::detail
