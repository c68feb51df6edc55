// The n choices of one request, beside the engine's loop: each is a sequence of its own, and with
// prefix caching every choice after the first is held out of the scheduler until the first has
// computed the prompt they share, then takes the prompt's full blocks from the cache instead of
// computing them again. And the prompt's own logprobs (completions' echo with logprobs), reported
// from the logits rows a step computed for them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/active_request.hpp"
#include "engine/request_stream.hpp"
#include "engine/runner.hpp"
#include "engine/scheduler.hpp"

namespace anvil::engine {

class HeldChoices {
public:
    // A later choice (ActiveRequest::behind names its first choice), kept out of the scheduler.
    void hold(uint64_t id) { ids_.push_back(id); }
    bool empty() const { return ids_.empty(); }
    std::size_t size() const { return ids_.size(); }
    void clear() { ids_.clear(); }
    // Each held choice whose first choice has computed the prompt (or is gone) goes to the
    // scheduler; one cancelled while it waited is forgotten.
    void release(ActiveRequests& active, Scheduler& scheduler);

private:
    std::vector<uint64_t> ids_;
};

// The prompt positions start + 1 … start + rows of `active`, each token's logprob under the model's
// own distribution at the position before it (no logit_bias and no grammar: they shape the answer,
// not the prompt) and the alternatives the request asked for, from `runner`'s logits rows
// first_row … first_row + rows − 1.
StreamEvent prompt_logprobs_event(const ActiveRequest& active, const Runner& runner, int first_row, int start, int rows, int vocab);

}  // namespace anvil::engine
