// Speculative sampling keeps the target's distribution: a two-sample chi-square test over thousands
// of seeded requests with and without a draft (and shown able to fail against the draft's own).
#include <catch2/catch.hpp>

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/block_manager.hpp"
#include "engine/draft.hpp"
#include "engine/engine.hpp"
#include "engine/make_model.hpp"
#include "engine/scheduler.hpp"
#include "engine/server.hpp"
#include "speculative_fixture.hpp"
#include "test_engine_helpers.hpp"
#include "test_engine_served.hpp"
#include "test_support.hpp"

// The cases sit in the fixture's namespace: in a unity build another file's helpers of the same
// names stay out of their way.
namespace anvil::test::speculative {

namespace {

// ---------------------------------------------------------------------------------------------
// Chi-square tests.

// The regularized upper incomplete gamma function Q(a, x) (series below a + 1, continued fraction
// above), for the chi-square distribution's upper tail.
double gamma_q(double a, double x) {
    if (x <= 0) return 1.0;
    const double log_front = -x + a * std::log(x) - std::lgamma(a);
    if (x < a + 1) {
        double term = 1.0 / a, sum = term, ap = a;
        for (int n = 0; n < 10000; ++n) {
            ap += 1;
            term *= x / ap;
            sum += term;
            if (std::abs(term) < std::abs(sum) * 1e-15) break;
        }
        return 1.0 - sum * std::exp(log_front);
    }
    constexpr double tiny = 1e-300;
    double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
    for (int i = 1; i < 10000; ++i) {
        const double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (std::abs(d) < tiny) d = tiny;
        c = b + an / c;
        if (std::abs(c) < tiny) c = tiny;
        d = 1 / d;
        const double delta = d * c;
        h *= delta;
        if (std::abs(delta - 1) < 1e-15) break;
    }
    return std::exp(log_front) * h;
}

double chi2_p_value(double chi2, int df) { return gamma_q(df / 2.0, chi2 / 2.0); }

using Key = std::vector<int32_t>;

struct TwoSample {
    double chi2 = 0;
    int df = 0;
    double p = 1;
    std::string table;
};

// Pearson's two-sample (homogeneity) test of two samples' category counts. Categories with fewer
// than 10 observations in both samples together are pooled (and the pool, when still that small,
// joins the smallest category), so that every expected count is at least about 5.
TwoSample two_sample(const std::map<Key, int>& a, const std::map<Key, int>& b) {
    std::map<Key, std::pair<double, double>> joined;
    double na = 0, nb = 0;
    for (const auto& [k, n] : a) joined[k].first += n, na += n;
    for (const auto& [k, n] : b) joined[k].second += n, nb += n;
    std::vector<std::pair<Key, std::pair<double, double>>> cells;
    std::pair<double, double> pooled{0, 0};
    for (const auto& [k, n] : joined) {
        if (n.first + n.second < 10) {
            pooled.first += n.first;
            pooled.second += n.second;
        } else {
            cells.emplace_back(k, n);
        }
    }
    if (pooled.first + pooled.second >= 10 || cells.empty()) {
        cells.emplace_back(Key{-1}, pooled);
    } else if (pooled.first + pooled.second > 0) {
        auto smallest = std::min_element(cells.begin(), cells.end(), [](const auto& x, const auto& y) {
            return x.second.first + x.second.second < y.second.first + y.second.second;
        });
        smallest->second.first += pooled.first;
        smallest->second.second += pooled.second;
    }
    TwoSample t;
    std::ostringstream table;
    const double ra = std::sqrt(nb / na), rb = std::sqrt(na / nb);
    for (const auto& [k, n] : cells) {
        const double diff = ra * n.first - rb * n.second;
        if (n.first + n.second > 0) t.chi2 += diff * diff / (n.first + n.second);
        table << " [";
        for (size_t i = 0; i < k.size(); ++i) table << (i ? "," : "") << k[i];
        table << "] " << n.first << "/" << n.second;
    }
    t.df = int(cells.size()) - 1;
    t.p = t.df > 0 ? chi2_p_value(t.chi2, t.df) : 1.0;
    t.table = table.str();
    return t;
}

// Generated tokens of `seeds` requests for one prompt, seeded first_seed, first_seed + 1, ...,
// all queued at once.
std::vector<std::vector<int32_t>> sampled_tokens(Engine& engine, const std::vector<int32_t>& prompt,
                                                 const SamplingParams& params, int seeds, int first_seed) {
    std::vector<Request> requests;
    for (int s = first_seed; s < first_seed + seeds; ++s) {
        Request r{"seed " + std::to_string(s), prompt, params, 1};
        r.params.seed = uint64_t(s);
        requests.push_back(std::move(r));
    }
    const Outcome out = run_requests(engine, requests);
    std::vector<std::vector<int32_t>> tokens;
    for (const auto& choices : out) {
        REQUIRE(choices[0].tokens.size() == size_t(params.max_tokens));
        tokens.push_back(choices[0].tokens);
    }
    return tokens;
}

// Counts of the tokens at `positions` (one category per combination).
std::map<Key, int> counts(const std::vector<std::vector<int32_t>>& samples, const std::vector<size_t>& positions) {
    std::map<Key, int> out;
    for (const auto& s : samples) {
        Key k;
        for (size_t p : positions) k.push_back(s[p]);
        out[k] += 1;
    }
    return out;
}

}  // namespace

// =============================================================================================
// 3b. Sampling: the output's distribution with a draft is the target's.

TEST_CASE("speculative: the chi-square helpers give the textbook values", "[speculative][stats]") {
    CHECK(chi2_p_value(24.322, 7) == Approx(0.001).epsilon(0.01));
    CHECK(chi2_p_value(3.841, 1) == Approx(0.05).epsilon(0.01));
    CHECK(chi2_p_value(124.342, 100) == Approx(0.05).epsilon(0.01));
    CHECK(chi2_p_value(0, 5) == 1.0);
    // Two samples of one distribution pass; of two different ones fail.
    std::map<Key, int> a = {{{1}, 500}, {{2}, 300}, {{3}, 200}}, b = {{{1}, 510}, {{2}, 290}, {{3}, 200}},
                       c = {{{1}, 400}, {{2}, 350}, {{3}, 250}};
    CHECK(two_sample(a, b).p > 0.5);
    CHECK(two_sample(a, c).p < 0.001);
}

TEST_CASE("speculative: sampled tokens with a draft follow the target's distribution (two-sample chi-square over 3000 seeds)",
          "[speculative][stats]") {
    // Temperature 1 over the 8 likeliest tokens, 3 tokens a request: the first comes from the
    // prompt's prefill (no draft), the second from the speculative rule (one draft, the lookahead
    // max_tokens - 1 - 1 allows), the third from the target after an accepted draft or from the
    // next step after a rejected one. Seeds 1..3000 without a draft, 3001..6000 with one: the
    // statistics are fixed numbers (the kernels give a row the same logits in any batch).
    constexpr int kSeeds = 3000;
    constexpr double kAlpha = 0.001;
    SamplingParams params;
    params.temperature = 1.0f;
    params.top_k = 8;
    params.max_tokens = 3;
    params.ignore_eos = true;
    EngineOptions o = engine_options();
    o.max_seqs = 16;
    o.max_batch_tokens = 256;
    o.block_size = 16;

    // Prompt lookup needs the sampled token to occur earlier: a prompt ending in the model's own
    // greedy loop (its continuation of "Hello" repeats one token) makes that common.
    std::vector<int32_t> looping;
    {
        Engine plain(model("plain"), o);
        looping = plain.tokenizer().encode("Hello", true);
        const Choice c = run_requests(plain, {{"loop", looping, greedy(14), 1}})[0][0];
        looping.insert(looping.end(), c.tokens.begin(), c.tokens.end());
    }
    struct Case {
        std::string name;
        DraftOptions draft;
        std::vector<int32_t> prompt;
    };
    const std::vector<int32_t> hello = Engine(model("plain"), o).tokenizer().encode("Hello there, how are you", true);
    const std::vector<Case> cases = {
        {"layers 1 on a plain model (q far from p)", draft_layers(1, 4), hello},
        {"another model (q unrelated to p)", draft_model(model("other-seed"), 4), hello},
        {"prompt lookup (q a point mass)", draft_ngram(1, 4), looping},
    };
    std::map<std::vector<int32_t>, std::vector<std::vector<int32_t>>> without;
    for (const Case& c : cases) {
        INFO(c.name);
        if (!without.count(c.prompt)) {
            Engine plain(model("plain"), o);
            without[c.prompt] = sampled_tokens(plain, c.prompt, params, kSeeds, 1);
        }
        const auto& p_samples = without[c.prompt];

        EngineOptions od = o;
        od.draft = c.draft;
        Engine drafted(model("plain"), od);
        // Other seeds than the target's sample: the two samples are independent, as the test
        // assumes (with the same seeds a point-mass draft, which draws nothing, would make many
        // draws coincide and the test blind).
        const auto q_samples = sampled_tokens(drafted, c.prompt, params, kSeeds, kSeeds + 1);
        settle(drafted);
        const uint64_t proposed = drafted.metrics().draft_proposed.load(), accepted = drafted.metrics().draft_accepted.load();
        CAPTURE(proposed, accepted);
        // The rule ran both ways many times: drafts accepted and drafts replaced from the residual.
        CHECK(proposed >= uint64_t(kSeeds / 10));
        CHECK(accepted >= proposed / 50);
        CHECK(accepted < proposed);
        for (const std::vector<size_t>& positions : {std::vector<size_t>{1}, std::vector<size_t>{2}, std::vector<size_t>{1, 2},
                                                     std::vector<size_t>{0, 1}}) {
            const TwoSample t = two_sample(counts(p_samples, positions), counts(q_samples, positions));
            INFO("tokens at " << positions.front() << (positions.size() > 1 ? "+" : "") << ": chi2 " << t.chi2 << ", df "
                              << t.df << ", p " << t.p << "\n" << t.table);
            CHECK(t.df >= 4);
            CHECK(t.p > kAlpha);
        }
    }

    // The test can fail: tokens from the draft's own distribution (what "always accept" would
    // give: the plain model cut after its first layer, sampled by itself) are told apart.
    Engine first(first_layer_of_plain(), o);
    const auto q_only = sampled_tokens(first, hello, params, kSeeds, kSeeds + 1);
    const auto& p_samples = without[hello];
    for (size_t position : {1u, 2u}) {
        const TwoSample t = two_sample(counts(p_samples, {position}), counts(q_only, {position}));
        INFO("the draft's own tokens at " << position << ": chi2 " << t.chi2 << ", df " << t.df << ", p " << t.p);
        CHECK(t.p < kAlpha);
    }
}

}  // namespace anvil::test::speculative
