// The promotion policy as pure functions: choose_promotion's precedence (pin, freeze, manual,
// nothing to promote, no default, each candidate against the default), decide's rules (gates,
// measured against this default, every threshold with its numbers and margin, inconclusive holds,
// the interval), ties, and the deterministic pick among contenders.
#include <functional>
#include <set>

#include <catch2/catch.hpp>

#include "daemon/qualify/metrics_catalogue.hpp"
#include "daemon/qualify/promotion_policy.hpp"

using namespace anvil::qualify;
using namespace std::chrono_literals;

namespace {

Contender contender(std::int64_t revision, const std::string& recipe, double e2e, double tph, std::optional<double> loss = 0.0) {
    Contender c;
    c.revision_id = revision;
    c.recipe_id = recipe;
    c.hard_gates_passed = true;
    c.control_revision_id = 1;  // measured against kControl
    c.metrics["warm_e2e_seconds"] = e2e;
    c.metrics["tasks_per_hour"] = tph;
    if (loss) c.metrics["relative_quality_loss"] = *loss;
    return c;
}

// The default: 10 s for the task set, 1440 tasks/h.
const Contender kControl = contender(1, "f32", 10.0, 1440.0, std::nullopt);

std::string checks_text(const Decision& d) {
    std::string out;
    for (const auto& c : d.checks) out += c + "\n";
    return out;
}

PolicyState state_at(std::chrono::system_clock::time_point now) {
    PolicyState s;
    s.now = now;
    return s;
}

}  // namespace

TEST_CASE("a candidate that beats every threshold with the margin is promoted, with every check's numbers", "[promotion]") {
    // 7 s against 10 s: gain .30 >= .27; tasks/h 2057 / 1440 = 1.43 >= 1.02; loss .005 <= .01.
    const Contender candidate = contender(2, "q8", 7.0, 2057.0, 0.005);
    const Decision d = decide(candidate, kControl, Thresholds{}, PolicyState{});
    INFO(d.reason << "\n" << checks_text(d));
    CHECK(d.action == Action::promote);
    CHECK(to_string(d.action) == "promote");
    CHECK_THAT(d.reason, Catch::Contains("every threshold"));
    const std::string checks = checks_text(d);
    CHECK_THAT(checks, Catch::Contains("relative_quality_loss 0.0050 <= 0.0100 (max 0.0300 - margin 0.0200): pass"));
    CHECK_THAT(checks, Catch::Contains("warm_e2e gain 0.3000 (1 - 7 s / 10 s) >= 0.2700 (min 0.2500 + margin 0.0200): pass"));
    CHECK_THAT(checks, Catch::Contains("tasks_per_hour ratio 1.4285 (2057 / 1440) >= 1.0200 (min 1.0000 + margin 0.0200): pass"));
    CHECK_THAT(checks, Catch::Contains("hard gates: pass"));
}

TEST_CASE("each threshold alone can pass a candidate over, and says which with its numbers", "[promotion]") {
    const Thresholds t;
    SECTION("quality: a loss within the requirement but inside the margin fails") {
        const Decision d = decide(contender(2, "q8", 7.0, 2057.0, 0.02), kControl, t, PolicyState{});
        CHECK(d.action == Action::pass_over);
        CHECK_THAT(d.reason, Catch::Contains("relative quality loss 0.0200 > 0.0100"));
        CHECK_THAT(checks_text(d), Catch::Contains("relative_quality_loss 0.0200 <= 0.0100 (max 0.0300 - margin 0.0200): fail"));
    }
    SECTION("warm e2e: a gain of .26 passes the requirement .25 but not the margin") {
        const Decision d = decide(contender(2, "q8", 7.4, 2057.0, 0.0), kControl, t, PolicyState{});
        CHECK(d.action == Action::pass_over);
        CHECK_THAT(d.reason, Catch::Contains("warm e2e gain 0.2600 < 0.2700"));
    }
    SECTION("tasks per hour: a ratio of 1.01 is below 1 + margin") {
        const Decision d = decide(contender(2, "q8", 7.0, 1454.4, 0.0), kControl, t, PolicyState{});
        CHECK(d.action == Action::pass_over);
        CHECK_THAT(d.reason, Catch::Contains("tasks per hour ratio 1.0100 < 1.0200"));
    }
    SECTION("a slower candidate fails twice and both are named") {
        const Decision d = decide(contender(2, "q8", 12.0, 1200.0, 0.0), kControl, t, PolicyState{});
        CHECK(d.action == Action::pass_over);
        CHECK_THAT(d.reason, Catch::Contains("warm e2e gain -0.2000") && Catch::Contains("tasks per hour ratio 0.8333"));
    }
    SECTION("a measured deterministic pass rate below the minimum fails") {
        Contender c = contender(2, "q8", 7.0, 2057.0, 0.0);
        c.metrics["deterministic_pass_rate"] = 2.0 / 3.0;
        const Decision d = decide(c, kControl, t, PolicyState{});
        CHECK(d.action == Action::pass_over);
        CHECK_THAT(checks_text(d), Catch::Contains("deterministic_pass_rate 0.6667 >= 1.0000: fail"));
    }
    SECTION("a zero margin lets the bare thresholds decide") {
        Thresholds bare = t;
        bare.margin = 0;
        CHECK(decide(contender(2, "q8", 7.5, 1440.0, 0.03), kControl, bare, PolicyState{}).action == Action::promote);
        CHECK(decide(contender(2, "q8", 7.5, 1439.0, 0.03), kControl, bare, PolicyState{}).action == Action::pass_over);
    }
}

TEST_CASE("a tie with the default never promotes: the margin keeps the default", "[promotion]") {
    const Contender twin = contender(2, "f32-copy", 10.0, 1440.0, 0.0);
    const Decision d = decide(twin, kControl, Thresholds{}, PolicyState{});
    CHECK(d.action == Action::pass_over);
    // And the default against the candidate it beat, the other way round, does not flip back.
    Contender winner = contender(2, "q8", 7.0, 2057.0, 0.0);
    Contender old_default = kControl;
    old_default.metrics["relative_quality_loss"] = 0.0;
    old_default.control_revision_id = winner.revision_id;  // requalified against the new default
    CHECK(decide(winner, kControl, Thresholds{}, PolicyState{}).action == Action::promote);
    CHECK(decide(old_default, winner, Thresholds{}, PolicyState{}).action == Action::pass_over);
}

TEST_CASE("a missing measurement holds as inconclusive and names it", "[promotion]") {
    const Thresholds t;
    Contender no_quality = contender(2, "q8", 7.0, 2057.0, std::nullopt);
    Decision d = decide(no_quality, kControl, t, PolicyState{});
    CHECK(d.action == Action::hold);
    CHECK(d.reason == "inconclusive: relative_quality_loss not measured");

    Contender control_without_e2e = kControl;
    control_without_e2e.metrics.erase("warm_e2e_seconds");
    d = decide(contender(2, "q8", 7.0, 2057.0, 0.0), control_without_e2e, t, PolicyState{});
    CHECK(d.action == Action::hold);
    CHECK_THAT(d.reason, Catch::Contains("inconclusive") && Catch::Contains("warm_e2e_seconds of the control"));

    Contender no_tph = contender(2, "q8", 7.0, 2057.0, 0.0);
    no_tph.metrics.erase("tasks_per_hour");
    d = decide(no_tph, kControl, t, PolicyState{});
    CHECK(d.action == Action::hold);
    CHECK_THAT(d.reason, Catch::Contains("tasks_per_hour of the candidate"));
    // Measured thresholds that fail still show in the checks of an inconclusive hold.
    no_tph.metrics["warm_e2e_seconds"] = 20.0;
    d = decide(no_tph, kControl, t, PolicyState{});
    CHECK(d.action == Action::hold);
    CHECK_THAT(checks_text(d), Catch::Contains("warm_e2e gain -1.0000") && Catch::Contains(": fail"));

    Contender nan = contender(2, "q8", std::nan(""), 2057.0, 0.0);
    CHECK(decide(nan, kControl, t, PolicyState{}).action == Action::hold);
}

TEST_CASE("failed hard gates pass a candidate over: the default itself is not re-promoted", "[promotion]") {
    Contender broken = contender(2, "q8", 1.0, 99999.0, 0.0);
    broken.hard_gates_passed = false;
    CHECK(decide(broken, kControl, Thresholds{}, PolicyState{}).action == Action::pass_over);
    CHECK(decide(broken, std::nullopt, Thresholds{}, PolicyState{}).reason == "hard gates failed");
    Contender same = kControl;
    same.metrics["relative_quality_loss"] = 0.0;
    const Decision d = decide(same, kControl, Thresholds{}, PolicyState{});
    CHECK(d.action == Action::hold);
    CHECK(d.reason == "the candidate is the default");
}

TEST_CASE("with no default, a validated candidate is promoted without comparisons or interval", "[promotion]") {
    PolicyState s;
    s.last_promotion = s.now - 1s;
    const Decision d = decide(contender(2, "q8", 7.0, 2057.0, std::nullopt), std::nullopt, Thresholds{}, s);
    CHECK(d.action == Action::promote);
    CHECK_THAT(d.reason, Catch::Contains("no default"));
}

TEST_CASE("the minimum interval holds a winning candidate until it has passed", "[promotion]") {
    const auto now = std::chrono::system_clock::time_point(std::chrono::hours(500000));
    PolicyState s = state_at(now);
    s.min_interval = 300s;
    s.last_promotion = now - 120s;
    const Contender winner = contender(2, "q8", 7.0, 2057.0, 0.0);
    Decision d = decide(winner, kControl, Thresholds{}, s);
    CHECK(d.action == Action::hold);
    CHECK(d.reason == "minimum interval: the last promotion was 120 s ago, 300 s required");
    CHECK_THAT(checks_text(d), Catch::Contains("since the last promotion 120 s >= 300 s: fail"));
    s.last_promotion = now - 300s;
    d = decide(winner, kControl, Thresholds{}, s);
    CHECK(d.action == Action::promote);
    CHECK_THAT(checks_text(d), Catch::Contains("since the last promotion 300 s >= 300 s: pass"));
    // The interval only delays a promotion; a loser is still passed over, not held.
    s.last_promotion = now - 1s;
    CHECK(decide(contender(3, "bf16", 10.0, 1440.0, 0.0), kControl, Thresholds{}, s).action == Action::pass_over);
}

TEST_CASE("a candidate measured against another default is inconclusive, whatever its numbers", "[promotion]") {
    Contender winner = contender(2, "q8", 7.0, 2057.0, 0.0);
    winner.control_revision_id = 9;
    Decision d = decide(winner, kControl, Thresholds{}, PolicyState{});
    CHECK(d.action == Action::hold);
    CHECK_THAT(d.reason, Catch::StartsWith("inconclusive: its quality was not measured against the current default (revision 1)"));
    winner.control_revision_id.reset();
    CHECK(decide(winner, kControl, Thresholds{}, PolicyState{}).action == Action::hold);
    // With no default there is nothing to have measured against.
    CHECK(decide(winner, std::nullopt, Thresholds{}, PolicyState{}).action == Action::promote);
}

namespace {

struct ChoiceRow {
    const char* name;
    std::function<void(PolicyState&)> policy;
    std::vector<Contender> validated;
    std::optional<Contender> current;
    Action action;
    std::optional<std::int64_t> revision;
    const char* condition;
    const char* reason_starts;
};

}  // namespace

TEST_CASE("choose_promotion: pin, freeze, manual, nothing, first default, winners and holds, in that order", "[promotion]") {
    const Contender q8 = contender(2, "q8", 7.0, 2057.0, 0.0);        // beats kControl
    const Contender fast = contender(4, "q4", 6.0, 2400.0, 0.0);      // beats it by more
    const Contender slow = contender(3, "bf16", 30.0, 100.0, 0.0);    // does not
    Contender elsewhere = q8;                                         // measured against another default
    elsewhere.control_revision_id = 7;
    auto pin = [](std::int64_t revision) {
        return [revision](PolicyState& p) { p.pin = Pin{"pinned-recipe", revision, "api:abcd1234"}; };
    };
    auto frozen = [](PolicyState& p) { p.freeze = Freeze{"reconciler", "automatic rollback"}; };
    auto manual = [](PolicyState& p) { p.policy = Policy::manual; };
    auto plain = [](PolicyState&) {};
    auto recent = [](PolicyState& p) { p.last_promotion = p.now - 10s; };

    const std::vector<ChoiceRow> rows{
        {"a pin promotes its revision over a freeze, the policy and the thresholds",
         [&](PolicyState& p) { pin(3)(p); frozen(p); manual(p); }, {q8, slow}, kControl, Action::promote, 3, "Pinned", "pinned as the default by api:abcd1234"},
        {"a pin names a revision that need not be validated now", pin(42), {}, kControl, Action::promote, 42, "Pinned", "pinned as the default"},
        {"a pin that is the default holds", pin(1), {q8}, kControl, Action::hold, std::nullopt, "Pinned", "pinned to pinned-recipe by api:abcd1234"},
        {"a freeze holds a winner", frozen, {q8}, kControl, Action::hold, std::nullopt, "Frozen", "frozen by reconciler: automatic rollback"},
        {"the manual policy holds a winner", manual, {q8}, kControl, Action::hold, std::nullopt, "Manual", "the policy is manual"},
        {"the manual policy holds a first default too", manual, {q8}, std::nullopt, Action::hold, std::nullopt, "Manual", "the policy is manual"},
        {"nothing validated, no default", plain, {}, std::nullopt, Action::hold, std::nullopt, "NothingToPromote", "no validated candidate yet"},
        {"nothing validated, a default", plain, {}, kControl, Action::hold, std::nullopt, "NothingToPromote", "no validated candidate is waiting"},
        {"no default: the best of the validated, unmeasured against anyone", plain, {slow, q8, fast}, std::nullopt, Action::promote, 4, "FirstDefault",
         "first default: the best validated candidate (warm e2e 6.000000 s)"},
        {"two winners: best_of's order picks the faster", plain, {q8, slow, fast}, kControl, Action::promote, 4, "BeatsDefault",
         "beat the default f32 (revision 1): hard gates: pass"},
        {"no winner: every hold named", plain, {slow, elsewhere}, kControl, Action::hold, std::nullopt, "Holding", "bf16: does not beat the default"},
        {"a winner inside the minimum interval holds", recent, {q8}, kControl, Action::hold, std::nullopt, "Holding", "q8: minimum interval"},
    };
    for (const auto& row : rows) {
        INFO(row.name);
        PolicyState policy;
        row.policy(policy);
        const PromotionChoice choice = choose_promotion(row.validated, row.current, Thresholds{}, policy);
        CHECK(choice.action == row.action);
        CHECK(choice.revision_id == row.revision);
        CHECK(anvil::qualify::to_string(choice.condition) == row.condition);
        CHECK_THAT(choice.reason, Catch::StartsWith(row.reason_starts));
    }
}

TEST_CASE("choose_promotion reports each candidate's own decision and who promotes", "[promotion]") {
    Contender elsewhere = contender(5, "q8-old", 7.0, 2057.0, 0.0);
    elsewhere.control_revision_id = 7;
    const PromotionChoice choice =
        choose_promotion({contender(2, "q8", 7.0, 2057.0, 0.0), contender(3, "bf16", 30.0, 100.0, 0.0), elsewhere}, kControl, Thresholds{}, PolicyState{});
    REQUIRE(choice.decisions.size() == 3);
    CHECK(choice.decisions[0].second.action == Action::promote);
    CHECK(choice.decisions[1].second.action == Action::pass_over);
    CHECK_THAT(choice.decisions[2].second.reason, Catch::StartsWith("inconclusive"));
    CHECK(choice.actor == "reconciler");
    PolicyState pinned;
    pinned.pin = Pin{"bf16", 3, "api:abcd1234"};
    CHECK(choose_promotion({}, kControl, Thresholds{}, pinned).actor == "api:abcd1234");
    CHECK(parse_policy("auto") == Policy::automatic);
    CHECK(parse_policy("manual") == Policy::manual);
    CHECK_FALSE(parse_policy("sometimes"));
    CHECK(to_string(Policy::automatic) == "auto");
}

TEST_CASE("best_of picks the fastest validated contender, ties by tasks per hour then recipe id", "[promotion]") {
    CHECK_FALSE(best_of({}));
    Contender broken = contender(9, "a-broken", 1.0, 9999.0);
    broken.hard_gates_passed = false;
    CHECK_FALSE(best_of({broken}));

    const Contender f32 = contender(1, "f32", 10.0, 1440.0);
    const Contender q8 = contender(2, "q8", 7.0, 2000.0);
    const Contender bf16 = contender(3, "bf16", 8.0, 1800.0);
    CHECK(best_of({f32, q8, bf16, broken})->recipe_id == "q8");
    CHECK(best_of({broken, bf16, f32, q8})->recipe_id == "q8");  // order does not matter

    // Equal e2e: more tasks per hour wins; equal both: the smaller recipe id, then revision id.
    const Contender q8_more = contender(4, "z-q8", 7.0, 2100.0);
    CHECK(best_of({q8, q8_more})->recipe_id == "z-q8");
    const Contender q8_twin = contender(5, "a-q8", 7.0, 2000.0);
    CHECK(best_of({q8, q8_twin})->recipe_id == "a-q8");
    CHECK(best_of({q8_twin, q8})->recipe_id == "a-q8");
    const Contender same_recipe_later = contender(6, "a-q8", 7.0, 2000.0);
    CHECK(best_of({same_recipe_later, q8_twin})->revision_id == 5);

    // A contender without a warm e2e time ranks after every measured one.
    Contender unmeasured = contender(7, "a-first", 1.0, 1.0);
    unmeasured.metrics.erase("warm_e2e_seconds");
    CHECK(best_of({unmeasured, f32})->recipe_id == "f32");
    CHECK(best_of({unmeasured})->recipe_id == "a-first");
}

TEST_CASE("the metrics catalogue: one entry per name, a unit and a direction each, gate pass rates as a family", "[promotion]") {
    std::set<std::string_view> names;
    for (const Metric& m : kMetrics) {
        INFO(m.name);
        CHECK(names.insert(m.name).second);
        CHECK_FALSE(m.unit.empty());
        CHECK(find_metric(m.name.ends_with(':') ? std::string(m.name) + "json" : std::string(m.name))->name == m.name);
    }
    CHECK(find_metric("warm_e2e_seconds")->better == Better::lower);
    CHECK(find_metric("tasks_per_hour")->better == Better::higher);
    CHECK(find_metric(gate_pass_rate_metric("determinism"))->unit == "ratio");
    CHECK(gate_pass_rate_metric("json") == "gate_pass_rate:json");
    CHECK_FALSE(find_metric("gate_pass_rate:"));  // a family needs a member
    CHECK_FALSE(find_metric("warm_e2e"));
}
