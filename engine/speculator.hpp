// Speculative decoding inside the continuous batch, as one object beside the engine's loop: how
// far each sequence may draft (its lookahead), the draft tokens proposed for the plan's decoding
// sequences (prompt lookup, the target's first layers, or a draft model on its own runner), and
// their verification against the target's logits by the speculative sampling rule, lossless for
// greedy and sampled requests alike. The engine calls it at three points of a step and owns
// nothing of its state.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/active_request.hpp"
#include "engine/block_manager.hpp"
#include "engine/draft.hpp"
#include "engine/metrics.hpp"
#include "engine/runner.hpp"
#include "engine/sampler.hpp"
#include "engine/scheduler.hpp"

namespace anvil::engine {

class Speculator {
public:
    // Sends a token of the target's (the logits it was sampled from, or null when only its largest
    // came back); true when it ended the sequence, which is then gone.
    using Emit = std::function<bool(ActiveRequest&, int32_t token, const float* logits)>;
    struct Limits {
        int max_seqs = 4;
        int max_batch_tokens = 256;
        int max_context = 0;
        int vocab = 0;
    };

    // `draft_runner`: the draft model's or self draft's runner; none for an early exit (which runs
    // the target's runner) or prompt lookup.
    Speculator(const DraftOptions& draft, Limits limits, std::unique_ptr<Runner> draft_runner, Metrics& metrics,
               SamplerScratch& scratch);

    // Each sequence's lookahead: no draft past what the request may still generate (the target
    // adds one token of its own), past the context, or for a constrained answer.
    void set_lookahead(ActiveRequests& requests) const;
    // Draft tokens for the plan's sequences that reserved positions for them (Sequence::drafts);
    // reserved positions left unproposed go back to the pool at once.
    void propose(const std::vector<ScheduledChunk>& plan, ActiveRequests& requests, Runner& target, BlockManager& blocks);
    // The target's logits at the sequence's draft positions (from `first_row`) accept a prefix of
    // its drafts and give one token after it; each goes out through `emit`. The rejected drafts'
    // blocks go back.
    void verify(ActiveRequest& active, const Runner& target, int first_row, BlockManager& blocks, const Emit& emit);

    size_t device_bytes() const { return draft_runner_ ? draft_runner_->device_bytes() : 0; }

private:
    struct Drafting {
        ActiveRequest* active;
        int tokens;  // draft tokens to propose: the plan's reservation
    };
    void propose_with_model(Runner& runner, int exit_after);
    int32_t draft_token(ActiveRequest& active, const Runner& runner, int row, int step);

    DraftOptions draft_;
    Limits limits_;
    std::unique_ptr<Runner> draft_runner_;
    Metrics& metrics_;
    SamplerScratch& scratch_;  // the engine's: one thread uses it at a time
    Batch draft_batch_;
    std::vector<Drafting> drafting_;
    std::vector<int> next_, rows_;     // [drafting]: per sequence, next position and logits row
    std::vector<float> target_probs_;  // [vocab]: the target's distribution at a draft position
    std::vector<float> residual_;      // [vocab]: max(0, p - q)
};

}  // namespace anvil::engine
