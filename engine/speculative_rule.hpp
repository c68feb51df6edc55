// The speculative sampling rule (Leviathan et al. 2023; Chen et al. 2023): a draft token d drawn
// from the draft's distribution q is kept with probability min(1, p(d) / q(d)), where p is the
// target's; a rejected one is replaced by a draw from max(0, p - q), normalized. Whatever q is,
// the token that comes out is distributed exactly as p: the draft changes the speed, never the
// output's distribution. With greedy params p and q are point masses, and the rule reduces to
// "keep d when it is the target's argmax, else take the argmax".
#pragma once

#include <cstdint>

#include "engine/sampler.hpp"

namespace anvil::engine {

struct DraftVerdict {
    bool accepted = false;
    int32_t token = -1;  // the draft token when accepted, the replacement otherwise
};

// p: the target's distribution at this position [vocab], normalized. q: the draft's distribution
// [vocab] that `draft` was drawn from, or nullptr when the draft was proposed deterministically
// (prompt lookup: q is a point mass on it). `residual` [vocab] is scratch.
DraftVerdict judge_draft(const float* p, const float* q, int vocab, int32_t draft, Rng& rng, float* residual);

// Draws a token from a distribution over [vocab] (it need not be normalized; its sum must be > 0).
int32_t draw_from(const float* weights, int vocab, Rng& rng);

}  // namespace anvil::engine
