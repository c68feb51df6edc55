#include "engine/speculative_rule.hpp"

#include <algorithm>

namespace anvil::engine {

int32_t draw_from(const float* weights, int vocab, Rng& rng) {
    double total = 0;
    for (int i = 0; i < vocab; ++i) total += weights[i];
    double target = rng.uniform() * total;
    int32_t last = 0;
    for (int i = 0; i < vocab; ++i) {
        if (weights[i] <= 0) continue;
        last = i;
        target -= weights[i];
        if (target < 0) return i;
    }
    return last;  // rounding left a sliver at the end: the last token with any weight
}

DraftVerdict judge_draft(const float* p, const float* q, int vocab, int32_t draft, Rng& rng, float* residual) {
    const double pd = p[draft], qd = q ? q[draft] : 1.0;
    // u < p/q without dividing: q(d) > 0 because d was drawn from q.
    if (rng.uniform() * qd < pd) return {true, draft};
    double total = 0;
    for (int i = 0; i < vocab; ++i) {
        const float r = std::max(0.0f, p[i] - (q ? q[i] : (i == draft ? 1.0f : 0.0f)));
        residual[i] = r;
        total += r;
    }
    // p = q everywhere (up to rounding) leaves nothing to correct towards: draw from p itself.
    if (total <= 0) return {false, draw_from(p, vocab, rng)};
    return {false, draw_from(residual, vocab, rng)};
}

}  // namespace anvil::engine
