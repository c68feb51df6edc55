#include "engine/choices.hpp"

namespace anvil::engine {

void HeldChoices::release(ActiveRequests& active, Scheduler& scheduler) {
    for (auto it = ids_.begin(); it != ids_.end();) {
        const auto held = active.find(*it);
        if (held == active.end()) {  // cancelled while it waited
            it = ids_.erase(it);
            continue;
        }
        const auto first = active.find(held->second->behind);
        if (first == active.end() || first->second->sequence.computed >= first->second->sequence.prompt_tokens) {
            scheduler.add(&held->second->sequence);
            it = ids_.erase(it);
        } else {
            ++it;
        }
    }
}

StreamEvent prompt_logprobs_event(const ActiveRequest& active, const Runner& runner, int first_row, int start, int rows, int vocab) {
    StreamEvent event;
    event.index = active.index;
    event.first_prompt_token = start + 1;
    for (int k = 0; k < rows; ++k) {
        const float* logits = runner.logits(first_row + k);
        const int32_t token = active.sequence.tokens[size_t(start + k + 1)];
        event.prompt.push_back({token, token_logprob(logits, vocab, token), top_logprobs(logits, vocab, active.params.prompt_logprobs)});
    }
    return event;
}

}  // namespace anvil::engine
