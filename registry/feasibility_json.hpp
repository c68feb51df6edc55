// The calculator's result as `anvil-serving.recipe-feasibility-result/v1` JSON: campaign, the
// equations, T_req, available bytes, each candidate's class, reasons, axes and figures, and a
// ledger of every variable used, keyed by its JSON pointer in the input.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "registry/feasibility.hpp"

namespace anvil::registry {

// Compact JSON, appended straight to `out` (the daemon serializes thousands of candidates, so no
// DOM is built; a caller that re-runs keeps `out`'s capacity by clearing it between runs). A missing
// bound is written as null, never as zero. Variables absent from the input appear under
// `missing_evidence` with `"absent": true`, not in the ledger.
void append_feasibility_json(std::string& out, const FeasibilityResult& result);
std::string feasibility_json(const FeasibilityResult& result);

// The same bytes, handed to `sink` in pieces of about `window_bytes` through one reused buffer, for
// output far larger than the caches (`anvil feasibility --format json` on a large campaign).
using JsonSink = std::function<void(std::string_view)>;
void write_feasibility_json(const FeasibilityResult& result, const JsonSink& sink, std::size_t window_bytes = std::size_t{1} << 20);

}  // namespace anvil::registry
