// compare_quality on hand-made sample sets: the KL estimator's numbers worked out by hand, top-1
// agreement, and what happens when positions are missing on either side.
#include <catch2/catch.hpp>

#include <cmath>

#include "daemon/qualify/qualification.hpp"

using anvil::qualify::compare_quality;
using nlohmann::json;

namespace {

json samples(std::vector<std::pair<std::string, json>> positions) {
    json out = {{"schema", "anvil.quality-samples/v1"}, {"positions", json::array()}, {"errors", json::array()}};
    int i = 0;
    for (auto& [prefix, top] : positions) out["positions"].push_back({{"prompt", 0}, {"index", i++}, {"prefix", prefix}, {"top_logprobs", top}});
    return out;
}

json top(std::vector<std::pair<std::string, double>> probabilities) {
    json out = json::object();
    for (auto& [token, p] : probabilities) out[token] = std::log(p);
    return out;
}

}  // namespace

TEST_CASE("identical samples compare to KL 0, full agreement and a quality score of 1", "[qualify]") {
    const json s = samples({{"The sky is", top({{" blue", 0.6}, {" grey", 0.2}, {" clear", 0.1}})},
                            {"The sky is blue", top({{".", 0.9}, {",", 0.05}})}});
    const auto c = compare_quality(s, s);
    CHECK(c.positions == 2);
    CHECK(c.control_positions == 2);
    CHECK(c.complete());
    CHECK(c.mean_kl == 0);
    CHECK(c.top1_agreement == 1);
    CHECK(c.quality_score == 1);
    CHECK(c.relative_quality_loss == 0);
}

TEST_CASE("KL over the same listed tokens counts the unlisted rest as one bucket", "[qualify]") {
    // P = {a .5, b .3, rest .2}, Q = {a .3, b .5, rest .2}: KL = .5 ln(5/3) + .3 ln(3/5) = .2 ln(5/3).
    const auto c = compare_quality(samples({{"x", top({{"a", 0.5}, {"b", 0.3}})}}), samples({{"x", top({{"a", 0.3}, {"b", 0.5}})}}));
    CHECK(c.mean_kl == Approx(0.2 * std::log(5.0 / 3.0)));
    CHECK(c.top1_agreement == 0);  // a first against b first
    CHECK(c.quality_score == 0);
    CHECK(c.relative_quality_loss == 1);
}

TEST_CASE("a token one side did not list gets that side's leftover mass, capped by its smallest listed", "[qualify]") {
    // P = {a .6, b .3} leaves .1, missing c: c and the rest share it, .05 each.
    // Q = {a .6, c .3} leaves .1, missing b: b .05, rest .05.
    // KL = .3 ln(.3/.05) + .05 ln(.05/.3) = .25 ln 6.
    const auto c = compare_quality(samples({{"x", top({{"a", 0.6}, {"b", 0.3}})}}), samples({{"x", top({{"a", 0.6}, {"c", 0.3}})}}));
    CHECK(c.mean_kl == Approx(0.25 * std::log(6.0)));
    CHECK(c.top1_agreement == 1);
    CHECK(c.quality_score == Approx(std::exp(-0.25 * std::log(6.0))));
    CHECK(c.relative_quality_loss == Approx(1 - 1 / std::pow(6.0, 0.25)));

    // The cap: P = {a .5, b .02} leaves .48, but an unlisted token cannot beat b's .02.
    // Q = {a .5, c .02}: P's c = .02, rest .46; Q's b = .02, rest .46; KL = 0 by symmetry of the values.
    const auto capped = compare_quality(samples({{"x", top({{"a", 0.5}, {"b", 0.02}})}}), samples({{"x", top({{"a", 0.5}, {"c", 0.02}})}}));
    CHECK(capped.mean_kl == Approx(0).margin(1e-12));
}

TEST_CASE("KL is averaged over positions and agreement is a share of them", "[qualify]") {
    const json control = samples({{"p1", top({{"a", 0.5}, {"b", 0.3}})}, {"p2", top({{"a", 0.9}})}});
    const json candidate = samples({{"p1", top({{"a", 0.3}, {"b", 0.5}})}, {"p2", top({{"a", 0.9}})}});
    const auto c = compare_quality(control, candidate);
    CHECK(c.positions == 2);
    CHECK(c.mean_kl == Approx(0.1 * std::log(5.0 / 3.0)));
    CHECK(c.top1_agreement == 0.5);
    CHECK(c.quality_score == Approx(std::exp(-c.mean_kl) * 0.5));
}

TEST_CASE("positions the candidate lacks make the comparison incomplete: none at all scores zero", "[qualify]") {
    const json control = samples({{"p1", top({{"a", 0.5}})}, {"p2", top({{"a", 0.9}})}});
    const auto partial = compare_quality(control, samples({{"p1", top({{"a", 0.5}})}}));
    CHECK(partial.positions == 1);
    CHECK(partial.control_positions == 2);
    CHECK_FALSE(partial.complete());
    const auto none = compare_quality(control, samples({{"elsewhere", top({{"a", 0.5}})}}));
    CHECK(none.positions == 0);
    CHECK_FALSE(none.complete());
    CHECK(none.quality_score == 0);
    CHECK(none.relative_quality_loss == 1);
    const auto garbage = compare_quality(json("not samples"), json::object());
    CHECK(garbage.positions == 0);
    CHECK(garbage.relative_quality_loss == 1);
}

TEST_CASE("a candidate certain where the control is not is bounded by the probability floor", "[qualify]") {
    // Q lists a with all the mass: b (control .5) gets Q's leftover, 0, floored at 1e-6.
    const auto c = compare_quality(samples({{"x", top({{"a", 0.5}, {"b", 0.5}})}}), samples({{"x", top({{"a", 1.0}})}}));
    CHECK(c.mean_kl == Approx(0.5 * std::log(0.5 / 1.0) + 0.5 * std::log(0.5 / 1e-6)));
    CHECK(std::isfinite(c.mean_kl));
}
