// The speculative sampling rule (engine/speculative_rule.*) on its own, statistically: whatever the
// draft's distribution q, "draw d from q, then judge_draft" must give tokens distributed as the
// target's p. Each check is a chi-square goodness-of-fit test of 200,000 seeded draws against p at
// a fixed significance (p = 0.001); the same harness run with deliberately wrong rules must fail
// it, so the test is shown able to fail. The draws are seeded: the statistics are fixed numbers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <vector>

#include "engine/sampler.hpp"
#include "engine/speculative_rule.hpp"

using namespace anvil::engine;

namespace {

constexpr int kVocab = 8;
constexpr int kDraws = 200000;
// The chi-square distribution's 0.999 quantile for 7 degrees of freedom (8 categories, no
// parameters estimated): a correct rule exceeds it once in a thousand seeds.
constexpr double kCritical7 = 24.322;

// A rule under test: one output token for one draw, given p, q (nullptr: a point mass on `fixed`).
using Rule = std::function<int32_t(const std::vector<float>& p, const float* q, int32_t fixed, Rng& rng,
                                   std::vector<float>& residual)>;

int32_t the_rule(const std::vector<float>& p, const float* q, int32_t fixed, Rng& rng, std::vector<float>& residual) {
    const int32_t d = q ? draw_from(q, kVocab, rng) : fixed;
    return judge_draft(p.data(), q, kVocab, d, rng, residual.data()).token;
}

// Wrong on purpose: the draft is always kept (the output is q).
int32_t always_accept(const std::vector<float>&, const float* q, int32_t fixed, Rng& rng, std::vector<float>&) {
    return q ? draw_from(q, kVocab, rng) : fixed;
}

// Wrong on purpose: a rejected draft is replaced by a draw from p instead of from max(0, p - q).
int32_t resample_from_p(const std::vector<float>& p, const float* q, int32_t fixed, Rng& rng, std::vector<float>& residual) {
    const int32_t d = q ? draw_from(q, kVocab, rng) : fixed;
    const DraftVerdict v = judge_draft(p.data(), q, kVocab, d, rng, residual.data());
    return v.accepted ? v.token : draw_from(p.data(), kVocab, rng);
}

// Wrong on purpose: the acceptance ratio inverted (q/p instead of p/q), the residual kept.
int32_t inverted_ratio(const std::vector<float>& p, const float* q, int32_t fixed, Rng& rng, std::vector<float>& residual) {
    const int32_t d = q ? draw_from(q, kVocab, rng) : fixed;
    const double pd = p[size_t(d)], qd = q ? q[d] : 1.0;
    if (rng.uniform() * pd < qd) return d;
    for (int i = 0; i < kVocab; ++i)
        residual[size_t(i)] = std::max(0.0f, p[size_t(i)] - (q ? q[i] : (i == d ? 1.0f : 0.0f)));
    const double total = std::accumulate(residual.begin(), residual.end(), 0.0);
    return total > 0 ? draw_from(residual.data(), kVocab, rng) : draw_from(p.data(), kVocab, rng);
}

struct Fit {
    double chi2 = 0;
    std::vector<int> counts;
};

// Pearson's statistic of kDraws outputs of `rule` against p. Categories with p = 0 must stay empty
// (any draw there is an error on its own), so they are left out of the statistic and counted apart.
Fit fit(const Rule& rule, const std::vector<float>& p, const std::vector<float>* q, int32_t fixed, uint64_t seed) {
    Rng rng(seed);
    std::vector<float> residual(kVocab);
    Fit f;
    f.counts.assign(kVocab, 0);
    for (int i = 0; i < kDraws; ++i) f.counts[size_t(rule(p, q ? q->data() : nullptr, fixed, rng, residual))] += 1;
    for (int t = 0; t < kVocab; ++t) {
        const double expected = double(p[size_t(t)]) * kDraws;
        if (expected <= 0) continue;
        const double d = f.counts[size_t(t)] - expected;
        f.chi2 += d * d / expected;
    }
    return f;
}

int outside_support(const Fit& f, const std::vector<float>& p) {
    int n = 0;
    for (int t = 0; t < kVocab; ++t)
        if (p[size_t(t)] <= 0) n += f.counts[size_t(t)];
    return n;
}

std::vector<float> normalized(std::vector<float> w) {
    const double total = std::accumulate(w.begin(), w.end(), 0.0);
    for (auto& x : w) x = float(x / total);
    return w;
}

}  // namespace

TEST_CASE("speculative rule: draft tokens judged by min(1, p/q) and the residual come out distributed as p",
          "[speculative][speculative_rule]") {
    // Every case the rule distinguishes: q above p on some tokens and below on others, a token q
    // proposes that p never gives (top-k cut it), a token p gives that q never proposes, q = p.
    const std::vector<float> p = normalized({0.30f, 0.20f, 0.15f, 0.12f, 0.10f, 0.08f, 0.05f, 0.0f});
    const std::vector<float> q_skewed = normalized({0.05f, 0.10f, 0.30f, 0.02f, 0.25f, 0.0f, 0.08f, 0.20f});
    const std::vector<float> q_close = normalized({0.28f, 0.22f, 0.14f, 0.13f, 0.09f, 0.08f, 0.06f, 0.0f});
    const std::vector<float> q_uniform(kVocab, 1.0f / kVocab);

    uint64_t seed = 1000;
    for (const auto* q : {&q_skewed, &q_close, &q_uniform, &p}) {
        INFO("q = " << (q == &q_skewed ? "skewed" : q == &q_close ? "close" : q == &q_uniform ? "uniform" : "p itself"));
        const Fit right = fit(the_rule, p, q, -1, ++seed);
        INFO("chi2 " << right.chi2);
        CHECK(right.chi2 < kCritical7);
        CHECK(outside_support(right, p) == 0);
        if (q == &p) continue;  // every wrong rule is right when the draft is the target
        // The harness can fail: rules that are wrong in each of the two halves of the rule.
        const Fit kept = fit(always_accept, p, q, -1, seed);
        const Fit from_p = fit(resample_from_p, p, q, -1, seed);
        const Fit inverted = fit(inverted_ratio, p, q, -1, seed);
        INFO("always accept " << kept.chi2 << ", resample from p " << from_p.chi2 << ", inverted " << inverted.chi2);
        CHECK(kept.chi2 > kCritical7);
        CHECK(inverted.chi2 > kCritical7);
        // With q close to p the rejections are rare (and resampling from p is nearly right); the
        // 200,000 draws still tell it apart for the skewed and uniform drafts.
        if (q != &q_close) CHECK(from_p.chi2 > kCritical7);
    }
}

TEST_CASE("speculative rule: a point-mass draft (prompt lookup, q = nullptr) also gives p", "[speculative][speculative_rule]") {
    const std::vector<float> p = normalized({0.30f, 0.20f, 0.15f, 0.12f, 0.10f, 0.08f, 0.05f, 0.0f});
    uint64_t seed = 2000;
    // A likely draft, an unlikely one, and one p never gives.
    for (int32_t fixed : {0, 6, 7}) {
        INFO("draft token " << fixed);
        const Fit right = fit(the_rule, p, nullptr, fixed, ++seed);
        INFO("chi2 " << right.chi2);
        CHECK(right.chi2 < kCritical7);
        CHECK(outside_support(right, p) == 0);
        const Fit kept = fit(always_accept, p, nullptr, fixed, seed);
        const Fit from_p = fit(resample_from_p, p, nullptr, fixed, seed);
        INFO("always accept " << kept.chi2 << ", resample from p " << from_p.chi2);
        CHECK(kept.chi2 > kCritical7);
        // A draft p never gives is always rejected, and then p itself is the residual: resampling
        // from p is right there. Elsewhere it is wrong.
        if (p[size_t(fixed)] > 0) CHECK(from_p.chi2 > kCritical7);
    }
}

TEST_CASE("speculative rule: acceptance is exactly min(1, p/q) and the verdict names its token", "[speculative][speculative_rule]") {
    const std::vector<float> p = normalized({0.30f, 0.20f, 0.15f, 0.12f, 0.10f, 0.08f, 0.05f, 0.0f});
    const std::vector<float> q = normalized({0.05f, 0.10f, 0.30f, 0.02f, 0.25f, 0.0f, 0.08f, 0.20f});
    std::vector<float> residual(kVocab);
    Rng rng(77);
    for (int32_t d : {0, 2, 4, 6, 7}) {
        if (q[size_t(d)] <= 0) continue;
        int accepted = 0;
        constexpr int n = 100000;
        for (int i = 0; i < n; ++i) {
            const DraftVerdict v = judge_draft(p.data(), q.data(), kVocab, d, rng, residual.data());
            if (v.accepted) {
                ++accepted;
                CHECK(v.token == d);
            } else {
                // A replacement comes from max(0, p - q): never a token where q already covers p.
                REQUIRE(v.token >= 0);
                REQUIRE(v.token < kVocab);
                CHECK(p[size_t(v.token)] > q[size_t(v.token)]);
            }
        }
        const double expected = std::min(1.0, double(p[size_t(d)]) / q[size_t(d)]);
        const double sd = std::sqrt(std::max(expected * (1 - expected), 1e-12) / n);
        INFO("draft " << d << ": accepted " << accepted << " of " << n << ", expected ratio " << expected);
        CHECK(std::abs(double(accepted) / n - expected) <= 5 * sd + 1e-9);
        if (p[size_t(d)] <= 0) CHECK(accepted == 0);
        if (p[size_t(d)] >= q[size_t(d)]) CHECK(accepted == n);
    }
    // The target's greedy point mass: only its argmax survives, whatever the draft proposed.
    std::vector<float> point(kVocab, 0.0f);
    point[3] = 1.0f;
    for (int32_t d = 0; d < kVocab; ++d) {
        const DraftVerdict v = judge_draft(point.data(), nullptr, kVocab, d, rng, residual.data());
        CHECK(v.accepted == (d == 3));
        CHECK(v.token == 3);
    }
}
