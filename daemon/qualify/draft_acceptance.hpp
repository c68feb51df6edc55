// The acceptance of a speculative engine's draft, from the anvil_engine_draft_* counters
// anvil-engine exposes on GET /metrics when it runs a draft. The figures are the difference between
// a scrape before the speed and quality measurements and one after them, so that requests outside
// the run (the gates, anyone else's) are not counted. Informational: the promotion policy reads none
// of them. An engine without the series (vLLM, llama.cpp, anvil-engine without a draft) gets no
// figures at all, never zeros.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/qualify/run_context.hpp"

namespace anvil::qualify::detail {

// The counters, each summed over its label sets (anvil-engine labels them with model and draft).
struct DraftCounters {
    double proposed = 0;       // anvil_engine_draft_proposed_tokens_total
    double accepted = 0;       // anvil_engine_draft_accepted_tokens_total
    double verifications = 0;  // anvil_engine_draft_verifications_total: one per sequence per verification
};

// The counters in a Prometheus text exposition; nullopt unless all three series are there.
std::optional<DraftCounters> parse_draft_counters(std::string_view exposition);

struct DraftAcceptance {
    // draft_proposed_tokens and draft_accepted_tokens (tokens); draft_acceptance_ratio (ratio) when
    // anything was proposed; draft_mean_accepted_tokens (tokens) when anything was verified.
    std::vector<Measurement> measurements;
    std::string note;  // for the journal: why figures are missing or what they include; "" if nothing to say
};

// The figures between two scrapes. Without `before` they are counted from the engine's start (and
// the note says so); without `after`, or with a counter that went backwards (the engine restarted
// in between), there are none.
DraftAcceptance draft_acceptance(const std::optional<DraftCounters>& before, const std::optional<DraftCounters>& after);

}  // namespace anvil::qualify::detail
