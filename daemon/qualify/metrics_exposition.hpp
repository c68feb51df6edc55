// Reading an engine's GET /metrics (Prometheus text exposition): each series' samples summed over
// their label sets. The qualification reads anvil-engine's draft counters and its GPU memory gauge
// from it; engines without a series (vLLM, llama.cpp) simply lack it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/qualify/run_context.hpp"

namespace anvil::qualify::detail {

// name -> the sum of its samples. Comments, blank lines and malformed or non-finite samples are
// passed over.
std::map<std::string, double, std::less<>> sum_series(std::string_view exposition);

// GET /metrics, journaled under `label`: its body, or nullopt when the request failed.
std::optional<std::string> scrape_metrics(RunContext& run, const std::string& label);

}  // namespace anvil::qualify::detail
