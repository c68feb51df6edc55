// One sequence the engine is running for a request: the sequence itself with its sampling state,
// its stream and what it has sent. The engine thread owns every one; the speculator (speculator.hpp)
// drafts and verifies for them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/json_grammar.hpp"
#include "engine/request_stream.hpp"
#include "engine/sampler.hpp"
#include "engine/scheduler.hpp"
#include "engine/tokenizer.hpp"

namespace anvil::engine {

struct ActiveRequest {
    Sequence sequence;
    SamplingParams params;
    Rng rng;
    std::shared_ptr<RequestStream> stream;
    StreamDecoder decoder;
    std::string pending;  // decoded text not yet sent: it may be the start of a stop string
    int generated = 0;
    int index = 0;  // the request's choice this sequence samples
    // [draft tokens][vocab]: the distributions a model draft sampled its tokens from
    std::vector<float> draft_probs;
    // response_format: where the answer stands against its grammar (such a sequence never drafts)
    std::optional<JsonMatcher> matcher;
    // A later choice of n, held out of the scheduler until this sequence (the first choice) has
    // computed the prompt they share; 0 when it is not held.
    uint64_t behind = 0;
};

// The engine's running sequences by id: the engine thread's, lent to the speculator and the held choices.
using ActiveRequests = std::unordered_map<uint64_t, std::unique_ptr<ActiveRequest>>;

}  // namespace anvil::engine
