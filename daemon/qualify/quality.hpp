// Quality samples: next-token top_logprobs at fixed text prefixes, drawn from /v1/completions so
// that any OpenAI engine can be sampled, and replayed at a control's prefixes so that a candidate
// is compared with the control at exactly the same texts. compare_quality (qualification.hpp)
// turns two sample sets into KL divergence, top-1 agreement and a quality score.
//
// Sample set shape (Report::quality_samples):
//   {"schema": "anvil.quality-samples/v1", "endpoint": "/v1/completions", "top_logprobs": k,
//    "positions": [{"prompt": i, "index": j, "prefix": "...", "top_logprobs": {"token": logprob, ...}}],
//    "errors": ["one line per position that could not be sampled"]}
#pragma once

#include "daemon/qualify/run_context.hpp"

namespace anvil::qualify::detail {

// This engine's own greedy continuations of the built-in prompts, sampled at each prefix.
nlohmann::json draw_quality_samples(RunContext& run);
// This engine sampled at the prefixes of `control` (a sample set as above).
nlohmann::json replay_quality_samples(RunContext& run, const nlohmann::json& control);

}  // namespace anvil::qualify::detail
