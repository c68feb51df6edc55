// The calculator against the one the seed documents come from: anvil-serving's
// recipe_feasibility.py (skills/anvil-serving-recipe-feasibility/scripts/, MIT). Its rules are
// restated below as a reference (`peer::evaluate`, in doubles as the peer computes), and both are
// run on generated campaigns that cover every evidence status, point, range, half-open and missing
// values, absent variables and every axis outcome. Class, the meaning of the first reason, every
// axis status and every figure must agree.
//
// With ANVIL_PEER_FEASIBILITY=/path/to/recipe_feasibility.py the same campaigns also go through the
// real script (python3), and its answers must agree with both.
//
// Where anvil differs on purpose (docs/FEASIBILITY.md, "Where anvil differs from the peer"), the
// generator stays clear of it and a test below shows the difference.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "registry/feasibility.hpp"
#include "registry/feasibility_input.hpp"
#include "test_feasibility_input.hpp"
#include "test_support.hpp"

using namespace anvil::registry;

namespace {

// --- the peer's rules, restated ------------------------------------------------------------

namespace peer {

using Bound = std::optional<double>;

struct Iv {
    Bound lo, hi;
};

Iv add(const Iv& a, const Iv& b) {
    return {a.lo && b.lo ? Bound(*a.lo + *b.lo) : Bound(), a.hi && b.hi ? Bound(*a.hi + *b.hi) : Bound()};
}
Iv subtract(const Iv& a, const Iv& b) {
    return {a.lo && b.hi ? Bound(*a.lo - *b.hi) : Bound(), a.hi && b.lo ? Bound(*a.hi - *b.lo) : Bound()};
}
Iv multiply(const Iv& a, const Iv& b) {  // non-negative factors only
    return {a.lo && b.lo ? Bound(*a.lo * *b.lo) : Bound(), a.hi && b.hi ? Bound(*a.hi * *b.hi) : Bound()};
}
// The peer refuses a divisor whose lower bound is zero or less; the generator never makes one.
Iv divide(const Iv& a, const Iv& b) {
    REQUIRE((!b.lo || *b.lo > 0));
    return {a.lo && b.hi ? Bound(*a.lo / *b.hi) : Bound(), a.hi && b.lo ? Bound(*a.hi / *b.lo) : Bound()};
}
Iv floor(const Iv& a) {
    return {a.lo ? Bound(std::floor(*a.lo)) : Bound(), a.hi ? Bound(std::floor(*a.hi)) : Bound()};
}
Iv one_minus(const Iv& a) { return {a.hi ? Bound(1.0 - *a.hi) : Bound(), a.lo ? Bound(1.0 - *a.lo) : Bound()}; }

std::string at_least(const Iv& actual, const Iv& required) {
    if (actual.hi && required.lo && *actual.hi < *required.lo) return "fail";
    if (actual.lo && required.hi && *actual.lo >= *required.hi) return "pass";
    return "unknown";
}
std::string at_most(const Iv& actual, const Iv& required) {
    if (actual.lo && required.hi && *actual.lo > *required.hi) return "fail";
    if (actual.hi && required.lo && *actual.hi <= *required.lo) return "pass";
    return "unknown";
}

// One variable as the peer reads it: its bounds whatever its status.
struct Var {
    Iv iv;
    std::string status;
    bool unbounded() const { return status == "unknown" || !iv.lo || !iv.hi; }
    bool proof() const { return status == "measured" || status == "confirmed"; }
};

Var read(const json& v) {
    Var out;
    out.status = v.at("status").get<std::string>();
    if (v.contains("value")) out.iv.lo = out.iv.hi = v["value"].get<double>();
    if (v.contains("min")) out.iv.lo = v["min"].get<double>();
    if (v.contains("max")) out.iv.hi = v["max"].get<double>();
    return out;
}
const Var kUnknown{{}, "unknown"};

Iv sum(const json& group, std::vector<Var>* records) {
    Iv total{0.0, 0.0};
    if (group.is_null()) return total;
    for (const auto& [_, v] : group.items()) {
        Var x = read(v);
        total = add(total, x.iv);
        records->push_back(x);
    }
    return total;
}

// What the first reason says, in a word: hard, stable, context, physical, policy, behaviour,
// open (a context or memory figure unknown), qualified, survivor.
struct Candidate {
    std::string classification;
    std::string cause;
    std::map<std::string, std::string> axes;  // context_limit, measured_context, memory and the behaviour axes
    std::map<std::string, Iv> behaviour;      // each compared behaviour figure (gain, loss, ratio, rate)
    Iv demand, physical_margin, policy_margin, t_max_physical, t_max_policy;
};

struct Result {
    Iv t_req, physical_available, policy_available;
    std::vector<Candidate> candidates;
};

Iv max_tokens(const Iv& available, const Iv& fixed, const Iv& per_token, const Iv& multiplier) {
    Iv room = subtract(available, fixed);
    const Iv per = multiply(per_token, multiplier);
    if (room.hi && *room.hi < 0) return {0.0, 0.0};
    if (room.lo) room.lo = std::max(0.0, *room.lo);
    return floor(divide(room, per));
}

struct BehaviourRule {
    const char* axis;
    const char* numerator;
    const char* denominator;  // nullptr: the numerator alone
    const char* threshold;
    bool one_minus;
    bool at_least;
};
constexpr BehaviourRule kRules[] = {
    {"correctness", "deterministic_pass_rate", nullptr, "min_deterministic_pass_rate", false, true},
    {"quality", "quality_score", "reference_quality_score", "max_relative_quality_loss", true, false},
    {"warm_e2e_speed", "warm_e2e_seconds", "no_spec_warm_e2e_seconds", "min_warm_e2e_gain", true, true},
    {"tasks_per_hour", "successful_tasks_per_hour", "reference_tasks_per_hour", "min_tasks_per_hour_ratio", false, true},
};

Result evaluate(const json& doc) {
    const json& q = doc.at("requirements");
    std::vector<Var> global;  // the requirement inputs every candidate's memory bound rests on
    Result r;
    r.t_req = sum(q.at("tokens"), &global);
    const Var concurrency = read(q.at("concurrency"));
    const Var vram = read(q.at("physical_vram_bytes"));
    global.push_back(concurrency);
    global.push_back(vram);
    Iv physical_reserves{0.0, 0.0}, all_reserves{0.0, 0.0};
    if (q.contains("vram_reserves")) {
        for (const auto& [_, reserve] : q["vram_reserves"].items()) {
            const Var amount = read(reserve.at("variable"));
            global.push_back(amount);
            all_reserves = add(all_reserves, amount.iv);
            if (reserve.at("kind") == "physical") physical_reserves = add(physical_reserves, amount.iv);
        }
    }
    r.physical_available = subtract(vram.iv, physical_reserves);
    r.policy_available = subtract(vram.iv, all_reserves);
    const json thresholds = q.value("thresholds", json::object());

    for (const json& c : doc.at("candidates")) {
        Candidate out;
        const Var context = c.contains("runtime_context_limit_tokens") ? read(c["runtime_context_limit_tokens"]) : kUnknown;
        std::optional<Var> stable;
        if (c.contains("measured_max_stable_context_tokens")) stable = read(c["measured_max_stable_context_tokens"]);
        std::vector<Var> memory = global;
        const Iv resident = sum(c.value("resident_components", json()), &memory);
        const Iv per_sequence = sum(c.value("per_sequence_components", json()), &memory);
        const Iv per_token = sum(c.value("per_token_components", json()), &memory);
        const Var multiplier = c.contains("kv_token_multiplier") ? read(c["kv_token_multiplier"]) : kUnknown;
        memory.push_back(multiplier);
        bool memory_unknown = false, memory_untrusted = false;
        for (const auto& v : memory) {
            memory_unknown = memory_unknown || v.unbounded();
            memory_untrusted = memory_untrusted || !v.proof();
        }
        const Iv fixed = add(resident, multiply(per_sequence, concurrency.iv));
        out.demand = add(fixed, multiply(multiply(per_token, r.t_req), multiplier.iv));

        const std::string context_axis = at_least(context.iv, r.t_req);
        const std::string stable_axis = stable ? at_least(stable->iv, r.t_req) : "not-measured";
        std::string memory_axis = "unknown";
        if (out.demand.lo && r.physical_available.hi && *out.demand.lo > *r.physical_available.hi) memory_axis = "physical-fail";
        else if (out.demand.lo && r.policy_available.hi && *out.demand.lo > *r.policy_available.hi) memory_axis = "policy-fail";
        else if (out.demand.hi && r.policy_available.lo && *out.demand.hi <= *r.policy_available.lo) memory_axis = "pass";
        out.axes = {{"context_limit", context_axis}, {"measured_context", stable_axis}, {"memory", memory_axis}};

        const json metrics = c.value("metrics", json::object());
        bool behaviour_fails = false, behaviour_all_pass = true;
        for (const auto& rule : kRules) {
            std::string status = "unknown";
            const bool present = metrics.contains(rule.numerator) && (!rule.denominator || metrics.contains(rule.denominator)) &&
                                 thresholds.contains(rule.threshold);
            if (present) {
                const Var n = read(metrics[rule.numerator]);
                Iv figure = n.iv;
                bool proof = n.proof();
                if (rule.denominator) {
                    const Var d = read(metrics[rule.denominator]);
                    figure = divide(figure, d.iv);
                    proof = proof && d.proof();
                }
                if (rule.one_minus) figure = one_minus(figure);
                out.behaviour[rule.axis] = figure;
                const Iv required = read(thresholds[rule.threshold]).iv;
                const std::string projected = rule.at_least ? at_least(figure, required) : at_most(figure, required);
                status = proof ? projected : "unknown";
            }
            out.axes[rule.axis] = status;
            behaviour_fails = behaviour_fails || status == "fail";
            behaviour_all_pass = behaviour_all_pass && status == "pass";
        }

        const std::string context_status = c.contains("runtime_context_limit_tokens") ? context.status : "";
        auto proof_or_model = [](const std::string& s, const char* proven, const char* modeled) -> std::string {
            if (s == "measured" || s == "confirmed") return proven;
            if (s == "estimated" || s == "assumed") return modeled;
            return "unresolved";
        };
        if (c.contains("hard_failures") && !c["hard_failures"].empty()) {
            out.classification = "empirically-disqualified", out.cause = "hard";
        } else if (stable_axis == "fail") {
            out.classification = proof_or_model(stable->status, "empirically-disqualified", "modeled-infeasible"), out.cause = "stable";
        } else if (context_axis == "fail") {
            out.classification = proof_or_model(context_status, "proven-infeasible", "modeled-infeasible"), out.cause = "context";
        } else if (memory_axis == "physical-fail") {
            out.classification = memory_unknown ? "unresolved" : memory_untrusted ? "modeled-infeasible" : "proven-infeasible";
            out.cause = "physical";
        } else if (memory_axis == "policy-fail") {
            out.classification = memory_unknown ? "unresolved" : "policy-infeasible", out.cause = "policy";
        } else if (behaviour_fails) {
            out.classification = "requirements-disqualified", out.cause = "behaviour";
        } else if (context_axis == "unknown" || memory_axis == "unknown") {
            out.classification = "unresolved", out.cause = "open";
        } else if (behaviour_all_pass) {
            out.classification = "math-qualified", out.cause = "qualified";
        } else {
            out.classification = "benchmark-survivor", out.cause = "survivor";
        }
        out.t_max_physical = max_tokens(r.physical_available, fixed, per_token, multiplier.iv);
        out.t_max_policy = max_tokens(r.policy_available, fixed, per_token, multiplier.iv);
        out.physical_margin = subtract(r.physical_available, out.demand);
        out.policy_margin = subtract(r.policy_available, out.demand);
        r.candidates.push_back(std::move(out));
    }
    return r;
}

}  // namespace peer

// --- generated campaigns ---------------------------------------------------------------------

class CampaignGenerator {
public:
    explicit CampaignGenerator(std::uint64_t seed) : rng_(seed) {}

    json campaign(int candidates) {
        // Requirements are mostly well stated, as in real campaigns; now and then any shape. In
        // some campaigns they are all measured or confirmed, so that a memory failure can be proven.
        proof_ = chance(0.35);
        const double prompt = uniform(1000, 200000), output = uniform(100, 20000);
        t_nominal_ = prompt + output;
        vram_nominal_ = uniform(4e10, 2e11);
        json tokens{{"prompt", integer_var(prompt, 0.1, 0.15, "tokens")}};
        if (chance(0.8)) tokens["output_reserve"] = integer_var(output, 0.1, 0.15, "tokens");
        json reserves = json::object();
        const int n_reserves = pick(0, 2);
        for (int i = 0; i < n_reserves; ++i)
            reserves["reserve_" + std::to_string(i)] = {{"kind", chance(0.5) ? "physical" : "policy"},
                                                        {"variable", integer_var(vram_nominal_ * uniform(0.005, 0.05), 0.2, 0.15, "bytes")}};
        json thresholds = json::object();
        const std::pair<const char*, double> kThresholds[] = {{"min_deterministic_pass_rate", 1.0},
                                                             {"max_relative_quality_loss", 0.03},
                                                             {"min_warm_e2e_gain", 0.25},
                                                             {"min_tasks_per_hour_ratio", 1.0}};
        for (const auto& [name, value] : kThresholds)
            if (chance(0.92)) thresholds[name] = {{"value", value}, {"unit", "ratio"}, {"status", chance(0.5) ? "assumed" : "confirmed"}, {"source", "generated"}};
        json doc{{"schema", "anvil-serving.recipe-feasibility-input/v1"},
                 {"campaign", "generated"},
                 {"requirements",
                  {{"tokens", tokens},
                   {"concurrency", integer_var(pick(1, 4), 0.15, 0.0, "sequences")},
                   {"physical_vram_bytes", integer_var(vram_nominal_, 0.1, 0.1, "bytes")},
                   {"vram_reserves", reserves},
                   {"thresholds", thresholds}}},
                 {"candidates", json::array()}};
        const bool campaign_proof = proof_;
        for (int i = 0; i < candidates; ++i) {
            proof_ = campaign_proof && chance(0.4);  // this candidate's own inputs proven too
            doc["candidates"].push_back(candidate(i));
        }
        return doc;
    }

private:
    json candidate(int i) {
        json c{{"id", "c" + std::to_string(i)}};
        if (chance(0.08)) c["hard_failures"] = {"generated hard failure " + std::to_string(i)};
        if (chance(0.9)) c["runtime_context_limit_tokens"] = integer_var(t_nominal_ * uniform(0.6, 1.6), 0.5, 0.3, "tokens");
        if (chance(0.55)) c["measured_max_stable_context_tokens"] = integer_var(t_nominal_ * uniform(0.6, 1.6), 0.5, 0.3, "tokens");
        // Memory: demand lands anywhere from well within the policy envelope to far over physical VRAM.
        const double resident = vram_nominal_ * uniform(0.3, 1.1);
        c["resident_components"] = json::object();
        const int n_resident = pick(1, 2);
        for (int k = 0; k < n_resident; ++k)
            c["resident_components"]["r" + std::to_string(k)] = integer_var(resident / n_resident, 0.4, 0.1, "bytes");
        if (chance(0.6)) c["per_sequence_components"] = {{"state", integer_var(uniform(1e5, 1e8), 0.3, 0.1, "bytes")}};
        // At least one per-token component with a positive floor: the peer refuses a zero divisor.
        const double per_token_bytes = vram_nominal_ * uniform(0.0, 0.3) / t_nominal_ + 1000;
        c["per_token_components"] = {{"kv", integer_var(per_token_bytes, 0.4, 0.1, "bytes/token", 1)}};
        if (chance(0.3)) c["per_token_components"]["draft_kv"] = integer_var(per_token_bytes * 0.2, 0.4, 0.1, "bytes/token", 1);
        if (chance(0.85)) c["kv_token_multiplier"] = integer_var(pick(1, 2), 0.3, 0.1, "copies", 1);
        json metrics = json::object();
        // A strong candidate's metrics are measured and pass, so that every axis can pass at once.
        const bool strong = chance(0.2);
        const bool proof = proof_;
        proof_ = proof_ || strong;
        auto metric = [&](const char* name, double lo, double hi) {
            if (chance(strong ? 1.0 : 0.88)) metrics[name] = ratio_var(lo, hi, strong);
        };
        if (chance(0.5)) {
            // Exactly the threshold: a point value, so any status but estimated.
            static const char* const kPointStatuses[] = {"measured", "confirmed", "assumed"};
            if (chance(0.88))
                metrics["deterministic_pass_rate"] = {{"value", 1.0}, {"unit", "ratio"}, {"status", kPointStatuses[pick(0, 2)]}, {"source", "generated"}};
        } else {
            metric("deterministic_pass_rate", 0.9, 1.0);
        }
        metric("quality_score", strong ? 98 : 75, 100);
        metric("reference_quality_score", 80, strong ? 100 : 100);
        metric("warm_e2e_seconds", 3, strong ? 5 : 12);
        metric("no_spec_warm_e2e_seconds", 8, 12);
        metric("successful_tasks_per_hour", strong ? 12 : 6, 15);
        metric("reference_tasks_per_hour", 8, strong ? 11 : 12);
        if (!metrics.empty()) c["metrics"] = metrics;
        proof_ = proof;
        return c;
    }

    // A status; `any` lets it be unknown. While proof_ is set, a status that is not `any` is
    // measured or confirmed.
    std::string status(bool any) {
        static const char* const kStatuses[] = {"measured", "confirmed", "estimated", "assumed", "unknown"};
        return kStatuses[pick(0, any ? 4 : proof_ ? 1 : 3)];
    }

    // A whole-number variable near `nominal`: a value, a range, half-open or no bounds at all, with
    // any status. `weird` is the chance of a half-open or bound-less shape or an unknown status;
    // `wide` the chance of a range that straddles most requirements. `floor` keeps the lower bound
    // at least that (the peer divides by per-token bytes and the multiplier).
    json integer_var(double nominal, double weird, double wide, const char* unit, double floor = 0) {
        const bool odd = chance(weird);
        json v{{"unit", unit}, {"status", status(odd)}};
        auto whole = [&](double x) { return static_cast<std::int64_t>(std::max(floor, std::round(x))); };
        const bool estimated = v["status"] == "estimated";
        const int shape = estimated ? 1 : odd ? pick(0, v["status"] == "unknown" ? 4 : 3) : pick(0, 1);
        const double spread = chance(wide) ? 0.5 : 0.03;
        const std::int64_t lo = whole(nominal * (1 - spread * uniform(0.1, 1))), hi = whole(nominal * (1 + spread * uniform(0.1, 1))) + 1;
        switch (shape) {
            case 0: v["value"] = whole(nominal); break;
            case 1: v["min"] = lo, v["max"] = hi; break;
            case 2: v["min"] = lo; break;
            case 3: v["max"] = hi; break;
            default: break;  // no bounds: unknown only
        }
        describe(v);
        return v;
    }

    // A positive ratio-scale metric in [lo, hi]: continuous, so it never meets a threshold exactly
    // (where anvil's 1e-9 tolerance differs from the peer on purpose).
    json ratio_var(double lo, double hi, bool plain = false) {
        const bool odd = !plain && chance(0.15);
        json v{{"unit", "ratio"}, {"status", status(odd)}};
        const bool estimated = v["status"] == "estimated";
        const int shape = estimated ? 1 : odd ? pick(0, v["status"] == "unknown" ? 4 : 3) : pick(0, 1);
        double a = uniform(lo, hi), b = uniform(lo, hi);
        if (a > b) std::swap(a, b);
        if (a == b) b = a + 0.5;
        switch (shape) {
            case 0: v["value"] = a; break;
            case 1: v["min"] = a, v["max"] = b; break;
            case 2: v["min"] = a; break;
            case 3: v["max"] = b; break;
            default: break;
        }
        describe(v);
        return v;
    }

    static void describe(json& v) {
        if (v["status"] == "unknown") v["notes"] = "generated: not measured";
        else v["source"] = "generated";
    }

    bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
    double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng_); }
    int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

    std::mt19937_64 rng_;
    bool proof_ = false;
    double t_nominal_ = 0;
    double vram_nominal_ = 0;
};

// --- anvil's answer in the same terms --------------------------------------------------------

// The first reason's meaning, in the words peer::Candidate::cause uses.
std::string cause_of(const CandidateResult& c, const FeasibilityInput& in) {
    const auto& hard = in.candidates[c.index].hard_failures;
    const std::string& first = c.reasons.at(0);
    if (!hard.empty() && first == hard.front()) return "hard";
    if (first.starts_with("measured stable context ")) return "stable";
    if (first.starts_with("runtime context limit ")) return "context";
    if (first.starts_with("demand ") && first.find(" exceeds physical available ") != std::string::npos) return "physical";
    if (first.starts_with("demand ") && first.find(" exceeds policy available ") != std::string::npos) return "policy";
    for (AxisName a : {AxisName::deterministic_correctness, AxisName::quality, AxisName::warm_e2e_speed, AxisName::tasks_per_hour})
        if (first.starts_with(std::string(to_string(a)) + ": ")) return "behaviour";
    if (first.starts_with("context_limit unknown: ") || first.starts_with("memory unknown: ")) return "open";
    if (first == "every axis passes on paper" || first == "the runtime limit, memory and every behaviour axis pass on paper") return "qualified";
    if (first.starts_with("context limit and memory pass on paper; behaviour not proven: ")) return "survivor";
    return "unrecognised: " + first;
}

// The peer's reason texts, by the same words.
std::string cause_of_peer_reason(const std::string& reason, bool hard) {
    if (hard) return "hard";
    static const std::pair<const char*, const char*> kTexts[] = {
        {"measured stable context is below the required token budget", "stable"},
        {"modeled stable context is below the required token budget", "stable"},
        {"unverified stable-context bounds are below the required token budget", "stable"},
        {"runtime context limit is below the required token budget", "context"},
        {"optimistic demand exceeds optimistic physical VRAM under encoded bounds", "physical"},
        {"policy failure depends on an unbounded or unknown input", "policy"},
        {"optimistic demand exceeds the declared policy VRAM envelope under encoded bounds", "policy"},
        {"one or more measured behavior thresholds fail", "behaviour"},
        {"context or VRAM bounds overlap or remain unbounded", "open"},
        {"all encoded resource bounds and measured thresholds pass", "qualified"},
        {"resource bounds pass; behavioral evidence remains incomplete", "survivor"},
    };
    for (const auto& [text, cause] : kTexts)
        if (reason == text) return cause;
    return "unrecognised: " + reason;
}

std::string describe(const peer::Iv& iv) {
    auto side = [](const peer::Bound& b) { return b ? std::to_string(*b) : std::string("none"); };
    return "[" + side(iv.lo) + ", " + side(iv.hi) + "]";
}

peer::Iv as_iv(const IntInterval& i) {
    return {i.min ? peer::Bound(static_cast<double>(*i.min)) : peer::Bound(), i.max ? peer::Bound(static_cast<double>(*i.max)) : peer::Bound()};
}
peer::Iv as_iv(const RatioInterval& i) { return {i.min, i.max}; }

// Exact for bytes and tokens (whole numbers below 2^53 in the generated campaigns); ratios within
// the outward rounding anvil applies to each bound.
bool same(const peer::Iv& a, const peer::Iv& b, double relative = 0) {
    auto close = [&](const peer::Bound& x, const peer::Bound& y) {
        if (x.has_value() != y.has_value()) return false;
        // 1 − q/r near zero keeps the rounding of q/r, not of its own size: hence the floor of 1.
        return !x || *x == *y || std::abs(*x - *y) <= relative * std::max({1.0, std::abs(*x), std::abs(*y)});
    };
    return close(a.lo, b.lo) && close(a.hi, b.hi);
}

const std::pair<AxisName, const char*> kAxisNames[] = {
    {AxisName::context_limit, "context_limit"},     {AxisName::stable_context, "measured_context"},
    {AxisName::memory, "memory"},                   {AxisName::deterministic_correctness, "correctness"},
    {AxisName::quality, "quality"},                 {AxisName::warm_e2e_speed, "warm_e2e_speed"},
    {AxisName::tasks_per_hour, "tasks_per_hour"},
};

// Every difference between anvil's result and a reference's, one line each.
std::vector<std::string> differences(const FeasibilityInput& in, const FeasibilityResult& ours, const peer::Result& theirs,
                                     bool compare_behaviour_figures) {
    std::vector<std::string> out;
    auto figure = [&](const std::string& what, const peer::Iv& a, const peer::Iv& b, double relative = 0) {
        if (!same(a, b, relative)) out.push_back(what + ": anvil " + describe(a) + ", peer " + describe(b));
    };
    figure("T_req", as_iv(ours.t_req), theirs.t_req);
    figure("physical available", as_iv(ours.physical_available), theirs.physical_available);
    figure("policy available", as_iv(ours.policy_available), theirs.policy_available);
    REQUIRE(ours.candidates.size() == theirs.candidates.size());
    for (std::size_t i = 0; i < ours.candidates.size(); ++i) {
        const CandidateResult& a = ours.candidates[i];
        const peer::Candidate& b = theirs.candidates[i];
        const std::string id = std::string(a.id) + ": ";
        if (to_string(a.verdict) != b.classification)
            out.push_back(id + "class " + std::string(to_string(a.verdict)) + ", peer " + b.classification + " (anvil: " + a.reasons.at(0) + ")");
        if (const std::string cause = cause_of(a, in); cause != b.cause) out.push_back(id + "reason " + cause + ", peer " + b.cause);
        for (const auto& [axis, name] : kAxisNames) {
            const std::string status(to_string(a.axis(axis).status));
            if (status != b.axes.at(name)) out.push_back(id + "axis " + name + " " + status + ", peer " + b.axes.at(name));
            if (compare_behaviour_figures && is_behaviour_axis(axis) && b.behaviour.contains(name))
                figure(id + name + " figure", as_iv(std::get<RatioInterval>(a.axis(axis).actual)), b.behaviour.at(name), 1e-12);
        }
        figure(id + "demand", as_iv(a.demand), b.demand);
        figure(id + "physical margin", as_iv(a.physical_margin), b.physical_margin);
        figure(id + "policy margin", as_iv(a.policy_margin), b.policy_margin);
        figure(id + "physical T_max", as_iv(a.physical_t_max), b.t_max_physical);
        figure(id + "policy T_max", as_iv(a.policy_t_max), b.t_max_policy);
    }
    return out;
}

// The first few differences, a line each: enough to see the pattern without the whole campaign.
std::string first_lines(const std::vector<std::string>& lines, const std::string& prefix = "") {
    std::string out;
    for (std::size_t i = 0; i < lines.size() && i < 12; ++i) out += prefix + lines[i] + "\n";
    if (lines.size() > 12) out += "... " + std::to_string(lines.size() - 12) + " more\n";
    return out;
}

FeasibilityInput parse(const json& doc) { return anvil::test::feasibility_input(doc); }

// The real script's answer, read into the reference's terms.
peer::Result run_peer_script(const std::string& script, const json& doc, const anvil::test::TempDir& dir) {
    const auto input = dir / "campaign.json", output = dir / "peer.json";
    anvil::test::write_file(input, doc.dump());
    const auto run = anvil::test::run({"python3", script, input.string(), "--format", "json", "--output", output.string()});
    INFO(run.output);
    REQUIRE(run.exit_code == 0);
    const json r = json::parse(anvil::test::read_file(output));
    auto iv = [](const json& j) {
        return peer::Iv{j["min"].is_null() ? peer::Bound() : peer::Bound(j["min"].get<double>()),
                        j["max"].is_null() ? peer::Bound() : peer::Bound(j["max"].get<double>())};
    };
    peer::Result out{iv(r["required_tokens"]), iv(r["physical_available_bytes"]), iv(r["policy_available_bytes"]), {}};
    for (std::size_t i = 0; i < r["candidates"].size(); ++i) {
        const json& c = r["candidates"][i];
        const json& source = doc["candidates"][i];
        peer::Candidate p;
        p.classification = c["classification"];
        p.cause = cause_of_peer_reason(c["reasons"][0], source.contains("hard_failures") && !source["hard_failures"].empty());
        const json& axes = c["axes"];
        p.axes = {{"context_limit", axes["context_limit"]}, {"measured_context", axes["measured_context"]}, {"memory", axes["memory"]}};
        for (const char* name : {"correctness", "quality", "warm_e2e_speed", "tasks_per_hour"}) p.axes[name] = axes[name]["status"];
        p.demand = iv(c["demand_bytes"]);
        p.physical_margin = iv(c["physical_margin_bytes"]);
        p.policy_margin = iv(c["policy_margin_bytes"]);
        p.t_max_physical = iv(c["estimated_max_tokens_physical"]);
        p.t_max_policy = iv(c["estimated_max_tokens_policy"]);
        out.candidates.push_back(std::move(p));
    }
    return out;
}

}  // namespace

TEST_CASE("feasibility agrees with anvil-serving's calculator on generated campaigns: class, reason, axes, figures", "[feasibility][peer]") {
    const char* script = std::getenv("ANVIL_PEER_FEASIBILITY");
    const int campaigns = script ? 60 : 200, per_campaign = 25;
    std::map<std::string, int> classes, axis_outcomes;
    std::size_t compared = 0;
    std::optional<anvil::test::TempDir> dir;
    if (script) dir.emplace();
    for (int k = 0; k < campaigns; ++k) {
        CampaignGenerator generator(1000 + static_cast<std::uint64_t>(k));
        const json doc = generator.campaign(per_campaign);
        const FeasibilityInput in = parse(doc);
        const FeasibilityResult ours = evaluate_feasibility(in);
        const peer::Result reference = peer::evaluate(doc);
        // CampaignGenerator(seed).campaign(25) remakes a failing campaign.
        INFO("campaign seed " << 1000 + k);
        CHECK(first_lines(differences(in, ours, reference, true)) == "");
        if (script) {
            const peer::Result real = run_peer_script(script, doc, *dir);
            INFO("against " << script);
            CHECK(first_lines(differences(in, ours, real, false)) == "");
            CHECK(first_lines(differences(in, ours, reference, true), "oracle vs script: ") == "");
        }
        for (const auto& c : ours.candidates) {
            ++classes[std::string(to_string(c.verdict)) + " (" + cause_of(c, in) + ")"];
            for (const auto& a : c.axes) ++axis_outcomes[std::string(to_string(a.name)) + " " + std::string(to_string(a.status))];
            ++compared;
        }
    }
    // The generator reaches every class by every route, and every outcome of every axis.
    const std::set<std::string> routes{
        "empirically-disqualified (hard)",  "empirically-disqualified (stable)", "modeled-infeasible (stable)",
        "unresolved (stable)",              "proven-infeasible (context)",       "modeled-infeasible (context)",
        "unresolved (context)",             "proven-infeasible (physical)",      "modeled-infeasible (physical)",
        "unresolved (physical)",            "policy-infeasible (policy)",        "unresolved (policy)",
        "requirements-disqualified (behaviour)", "unresolved (open)",            "math-qualified (qualified)",
        "benchmark-survivor (survivor)"};
    for (const auto& route : routes) {
        INFO(route);
        CHECK(classes[route] > 0);
    }
    for (const char* outcome : {"context_limit pass", "context_limit fail", "context_limit unknown", "stable_context pass",
                                "stable_context fail", "stable_context unknown", "stable_context not-measured", "memory pass",
                                "memory physical-fail", "memory policy-fail", "memory unknown", "quality pass", "quality fail",
                                "quality unknown", "warm_e2e_speed fail", "tasks_per_hour fail", "deterministic_correctness pass",
                                "deterministic_correctness fail"}) {
        INFO(outcome);
        CHECK(axis_outcomes[outcome] > 0);
    }
    CHECK(compared == static_cast<std::size_t>(campaigns * per_campaign));
}

TEST_CASE("a stable context never measured is evidence to gather, not a verdict: the class is as if it passed", "[feasibility][peer]") {
    // Issue 22's 44 differing candidates all looked like this: no measured_max_stable_context_tokens.
    CampaignGenerator generator(7);
    json doc = generator.campaign(1);
    json& c = doc["candidates"][0];
    c = {{"id", "no-stable"},
         {"runtime_context_limit_tokens", {{"value", 1 << 20}, {"unit", "tokens"}, {"status", "confirmed"}, {"source", "t"}}},
         {"resident_components", {{"w", {{"value", 1000}, {"unit", "bytes"}, {"status", "measured"}, {"source", "t"}}}}},
         {"per_token_components", {{"kv", {{"value", 1}, {"unit", "bytes/token"}, {"status", "measured"}, {"source", "t"}}}}},
         {"kv_token_multiplier", {{"value", 1}, {"unit", "copies"}, {"status", "measured"}, {"source", "t"}}}};
    doc["requirements"]["tokens"] = {{"prompt", {{"value", 1000}, {"unit", "tokens"}, {"status", "measured"}, {"source", "t"}}}};
    doc["requirements"]["concurrency"] = {{"value", 1}, {"unit", "sequences"}, {"status", "measured"}, {"source", "t"}};
    doc["requirements"]["physical_vram_bytes"] = {{"value", 1 << 30}, {"unit", "bytes"}, {"status", "measured"}, {"source", "t"}};
    doc["requirements"]["vram_reserves"] = json::object();
    const FeasibilityInput in = parse(doc);
    const FeasibilityResult r = evaluate_feasibility(in);
    const auto& candidate = r.candidates.at(0);
    CHECK(candidate.axis(AxisName::stable_context).status == AxisStatus::not_measured);
    CHECK(candidate.verdict == Verdict::benchmark_survivor);  // no metrics: behaviour unproven
    CHECK(peer::evaluate(doc).candidates.at(0).classification == "benchmark-survivor");
    bool asks = false;
    for (const auto& reason : candidate.reasons)
        asks = asks || reason == "stable context not measured: measure /candidates/0/measured_max_stable_context_tokens at T_req 1000 tokens";
    CHECK(asks);
}

TEST_CASE("where anvil differs from the peer on purpose: ratio tolerance, whole bytes, no divisor refused", "[feasibility][peer]") {
    // A 3 % loss against a 3 % limit: 1 - 97/100 is 0.030000000000000027 in doubles, so the peer's
    // plain comparison fails it; anvil's 1e-9 tolerance in the candidate's favour passes it.
    json quality_doc = {{"requirements", {{"tokens", {{"p", {{"value", 1}, {"unit", "tokens"}, {"status", "measured"}, {"source", "t"}}}}},
                                           {"concurrency", {{"value", 1}, {"unit", "sequences"}, {"status", "measured"}, {"source", "t"}}},
                                           {"physical_vram_bytes", {{"value", 100}, {"unit", "bytes"}, {"status", "measured"}, {"source", "t"}}},
                                           {"thresholds", {{"max_relative_quality_loss", {{"value", 0.03}, {"unit", "ratio"}, {"status", "assumed"}, {"source", "t"}}}}}}},
                        {"campaign", "t"},
                        {"candidates", {{{"id", "q"},
                                         {"metrics", {{"quality_score", {{"value", 97.0}, {"unit", "score"}, {"status", "measured"}, {"source", "t"}}},
                                                      {"reference_quality_score", {{"value", 100.0}, {"unit", "score"}, {"status", "measured"}, {"source", "t"}}}}}}}}};
    CHECK(peer::evaluate(quality_doc).candidates[0].axes.at("quality") == "fail");
    CHECK(evaluate_feasibility(parse(quality_doc)).candidates[0].axis(AxisName::quality).status == AxisStatus::pass);

    // Bytes are whole: a fractional figure widens outward to whole bytes, where the peer keeps 2.5.
    json fractional = quality_doc;
    fractional["candidates"][0] = {{"id", "f"},
                                   {"resident_components", {{"w", {{"value", 2.5}, {"unit", "bytes"}, {"status", "measured"}, {"source", "t"}}}}},
                                   {"per_token_components", {{"kv", {{"value", 1}, {"unit", "bytes/token"}, {"status", "measured"}, {"source", "t"}}}}},
                                   {"kv_token_multiplier", {{"value", 1}, {"unit", "copies"}, {"status", "measured"}, {"source", "t"}}}};
    const peer::Iv peer_demand = peer::evaluate(fractional).candidates[0].demand;
    CHECK((peer_demand.lo == 3.5 && peer_demand.hi == 3.5));
    CHECK(evaluate_feasibility(parse(fractional)).candidates[0].demand == IntInterval{3, 4});

    // No per-token bytes at all: the peer refuses the whole campaign (a divisor bounded below by
    // zero); anvil reports T_max as having no upper bound and judges the rest.
    json no_tokens = quality_doc;
    no_tokens["candidates"][0] = {{"id", "n"},
                                  {"resident_components", {{"w", {{"value", 10}, {"unit", "bytes"}, {"status", "measured"}, {"source", "t"}}}}},
                                  {"kv_token_multiplier", {{"value", 1}, {"unit", "copies"}, {"status", "measured"}, {"source", "t"}}}};
    const auto n = evaluate_feasibility(parse(no_tokens)).candidates[0];
    CHECK(n.physical_t_max == IntInterval{});
    CHECK(n.demand == IntInterval::exact(10));
    CHECK(n.axis(AxisName::memory).status == AxisStatus::pass);
}
