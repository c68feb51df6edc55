// The promotion rules as pure functions: no clock reads (PolicyState::now is given), no I/O.
// choose_promotion's precedence: pin, freeze, the manual policy, no candidate, no default, then
// decide per candidate: hard gates, measured against this default, thresholds (inconclusive
// holds), the minimum interval; among the winners, best_of's order.
#include "daemon/qualify/promotion_policy.hpp"
#include "daemon/qualify/metrics_catalogue.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace anvil::qualify {

std::string_view to_string(Action a) {
    switch (a) {
    case Action::promote: return "promote";
    case Action::hold: return "hold";
    case Action::pass_over: return "pass_over";
    }
    return "hold";
}

std::string_view to_string(PromotionCondition c) {
    switch (c) {
        case PromotionCondition::pinned: return "Pinned";
        case PromotionCondition::frozen: return "Frozen";
        case PromotionCondition::manual: return "Manual";
        case PromotionCondition::nothing_to_promote: return "NothingToPromote";
        case PromotionCondition::first_default: return "FirstDefault";
        case PromotionCondition::beats_default: return "BeatsDefault";
        case PromotionCondition::holding: return "Holding";
    }
    return "?";
}

std::string_view to_string(Policy p) { return p == Policy::manual ? "manual" : "auto"; }

std::optional<Policy> parse_policy(std::string_view text) {
    if (text == "auto") return Policy::automatic;
    if (text == "manual") return Policy::manual;
    return std::nullopt;
}

namespace {

// The contender's value of a catalogued metric, when measured and finite.
std::optional<double> value_of(const Contender& c, const Metric& m) {
    const auto it = c.metrics.find(std::string(m.name));
    if (it == c.metrics.end() || !std::isfinite(it->second)) return std::nullopt;
    return it->second;
}

Decision make(Action action, std::string reason, std::vector<std::string> checks = {}) {
    return Decision{action, std::move(reason), std::move(checks)};
}


// The comparison with the control: every threshold as a check line with its numbers; `missing`
// gets the metrics that could not be compared, `failed` the thresholds that were not met.
void compare(const Contender& candidate, const Contender& control, const Thresholds& t, std::vector<std::string>& checks,
             std::vector<std::string>& missing, std::vector<std::string>& failed) {
    const double m = t.margin;
    const Comparison numbers = compare_with(candidate, control);

    if (const auto loss = numbers.relative_quality_loss) {
        const double limit = t.max_relative_quality_loss - m;
        const bool ok = *loss <= limit;
        checks.push_back(fmt::format("relative_quality_loss {:.4f} <= {:.4f} (max {:.4f} - margin {:.4f}): {}", *loss, limit,
                                     t.max_relative_quality_loss, m, ok ? "pass" : "fail"));
        if (!ok) failed.push_back(fmt::format("relative quality loss {:.4f} > {:.4f}", *loss, limit));
    } else {
        checks.push_back("relative_quality_loss: not measured");
        missing.push_back(std::string(metric::relative_quality_loss.name));
    }

    const auto cand_e2e = value_of(candidate, metric::warm_e2e), ctrl_e2e = value_of(control, metric::warm_e2e);
    if (numbers.warm_e2e_gain) {
        const double gain = *numbers.warm_e2e_gain, limit = t.min_warm_e2e_gain + m;
        const bool ok = gain >= limit;
        checks.push_back(fmt::format("warm_e2e gain {:.4f} (1 - {:.4g} s / {:.4g} s) >= {:.4f} (min {:.4f} + margin {:.4f}): {}",
                                     gain, *cand_e2e, *ctrl_e2e, limit, t.min_warm_e2e_gain, m, ok ? "pass" : "fail"));
        if (!ok) failed.push_back(fmt::format("warm e2e gain {:.4f} < {:.4f}", gain, limit));
    } else {
        const std::string which = !cand_e2e ? "candidate" : !ctrl_e2e ? "control" : "control (not positive)";
        checks.push_back("warm_e2e_seconds: not measured for the " + which);
        missing.push_back("warm_e2e_seconds of the " + which);
    }

    const auto cand_tph = value_of(candidate, metric::tasks_per_hour), ctrl_tph = value_of(control, metric::tasks_per_hour);
    if (numbers.tasks_per_hour_ratio) {
        const double ratio = *numbers.tasks_per_hour_ratio, limit = t.min_tasks_per_hour_ratio + m;
        const bool ok = ratio >= limit;
        checks.push_back(fmt::format("tasks_per_hour ratio {:.4f} ({:.4g} / {:.4g}) >= {:.4f} (min {:.4f} + margin {:.4f}): {}",
                                     ratio, *cand_tph, *ctrl_tph, limit, t.min_tasks_per_hour_ratio, m, ok ? "pass" : "fail"));
        if (!ok) failed.push_back(fmt::format("tasks per hour ratio {:.4f} < {:.4f}", ratio, limit));
    } else {
        const std::string which = !cand_tph ? "candidate" : !ctrl_tph ? "control" : "control (not positive)";
        checks.push_back("tasks_per_hour: not measured for the " + which);
        missing.push_back("tasks_per_hour of the " + which);
    }

    // Where the pass rates were measured, they are compared too (the gates already applied them).
    if (const auto rate = value_of(candidate, metric::deterministic_pass_rate)) {
        const bool ok = *rate >= t.min_deterministic_pass_rate;
        checks.push_back(fmt::format("deterministic_pass_rate {:.4f} >= {:.4f}: {}", *rate, t.min_deterministic_pass_rate,
                                     ok ? "pass" : "fail"));
        if (!ok) failed.push_back(fmt::format("deterministic pass rate {:.4f} < {:.4f}", *rate, t.min_deterministic_pass_rate));
    }
}

}  // namespace

Comparison compare_with(const Contender& candidate, const Contender& control) {
    Comparison c;
    c.relative_quality_loss = value_of(candidate, metric::relative_quality_loss);
    const auto cand_e2e = value_of(candidate, metric::warm_e2e), ctrl_e2e = value_of(control, metric::warm_e2e);
    if (cand_e2e && ctrl_e2e && *ctrl_e2e > 0) c.warm_e2e_gain = 1 - *cand_e2e / *ctrl_e2e;
    const auto cand_tph = value_of(candidate, metric::tasks_per_hour), ctrl_tph = value_of(control, metric::tasks_per_hour);
    if (cand_tph && ctrl_tph && *ctrl_tph > 0) c.tasks_per_hour_ratio = *cand_tph / *ctrl_tph;
    return c;
}

Decision decide(const Contender& candidate, const std::optional<Contender>& control, const Thresholds& thresholds,
                const PolicyState& state) {
    if (!candidate.hard_gates_passed) return make(Action::pass_over, "hard gates failed", {"hard gates: fail"});
    std::vector<std::string> checks{"hard gates: pass"};

    if (control && control->revision_id == candidate.revision_id && control->recipe_id == candidate.recipe_id)
        return make(Action::hold, "the candidate is the default", checks);

    // Quality is a comparison of samples with the default's: one made against another default says
    // nothing about this one.
    if (control && candidate.control_revision_id != control->revision_id)
        return make(Action::hold,
                    "inconclusive: its quality was not measured against the current default (revision " + std::to_string(control->revision_id) +
                        "); qualify it again to compare",
                    checks);

    Decision verdict;
    if (!control) {
        verdict = make(Action::promote, "no default: the best validated candidate becomes the default", checks);
    } else {
        std::vector<std::string> missing, failed;
        if (!control->hard_gates_passed) checks.push_back("the default's hard gates: fail (it is compared all the same)");
        compare(candidate, *control, thresholds, checks, missing, failed);
        if (!missing.empty()) {
            verdict = make(Action::hold, "inconclusive: " + fmt::format("{}", fmt::join(missing, ", ")) + " not measured", checks);
        } else if (!failed.empty()) {
            verdict = make(Action::pass_over, "does not beat the default: " + fmt::format("{}", fmt::join(failed, "; ")), checks);
        } else {
            verdict = make(Action::promote, "beats the default on every threshold with margin " + fmt::format("{:.4f}", thresholds.margin),
                           checks);
            if (state.last_promotion) {
                const auto since = std::chrono::duration_cast<std::chrono::seconds>(state.now - *state.last_promotion);
                const bool ok = since >= state.min_interval;
                verdict.checks.push_back(fmt::format("since the last promotion {} s >= {} s: {}", since.count(),
                                                     state.min_interval.count(), ok ? "pass" : "fail"));
                if (!ok)
                    verdict = make(Action::hold,
                                   fmt::format("minimum interval: the last promotion was {} s ago, {} s required",
                                               since.count(), state.min_interval.count()),
                                   verdict.checks);
            }
        }
    }

    return verdict;
}

std::optional<Contender> best_of(const std::vector<Contender>& contenders) {
    std::vector<const Contender*> passed;
    for (const auto& c : contenders)
        if (c.hard_gates_passed) passed.push_back(&c);
    if (passed.empty()) return std::nullopt;
    // Missing warm e2e time ranks last, missing tasks/h lowest: a measured contender beats an
    // unmeasured one. Then recipe id and revision id, so the pick never depends on input order.
    auto key = [](const Contender* c) {
        const auto e2e = value_of(*c, metric::warm_e2e);
        const auto tph = value_of(*c, metric::tasks_per_hour);
        return std::make_tuple(e2e ? 0 : 1, e2e.value_or(0.0), -tph.value_or(-INFINITY), c->recipe_id, c->revision_id);
    };
    return **std::min_element(passed.begin(), passed.end(),
                              [&](const Contender* a, const Contender* b) { return key(a) < key(b); });
}

PromotionChoice choose_promotion(const std::vector<Contender>& validated, const std::optional<Contender>& current,
                                 const Thresholds& thresholds, const PolicyState& state) {
    PromotionChoice choice;
    auto hold = [&](PromotionCondition condition, std::string reason) {
        choice.action = Action::hold;
        choice.condition = condition;
        choice.reason = std::move(reason);
        return choice;
    };
    if (state.pin) {
        const Pin& pin = *state.pin;
        if (current && current->revision_id == pin.revision_id) return hold(PromotionCondition::pinned, "pinned to " + pin.recipe_id + " by " + pin.actor);
        choice.action = Action::promote;
        choice.revision_id = pin.revision_id;
        choice.actor = pin.actor;
        choice.condition = PromotionCondition::pinned;
        choice.reason = "pinned as the default by " + pin.actor;
        return choice;
    }
    if (state.freeze) return hold(PromotionCondition::frozen, "frozen by " + state.freeze->actor + ": " + state.freeze->reason);
    if (state.policy == Policy::manual) return hold(PromotionCondition::manual, "the policy is manual: pin a recipe to change the default");
    if (validated.empty()) return hold(PromotionCondition::nothing_to_promote, current ? "no validated candidate is waiting" : "no validated candidate yet");
    if (!current) {
        const auto best = best_of(validated);
        if (!best) return hold(PromotionCondition::nothing_to_promote, "no validated candidate passed its hard gates");
        const auto e2e = value_of(*best, metric::warm_e2e);
        choice.action = Action::promote;
        choice.revision_id = best->revision_id;
        choice.condition = PromotionCondition::first_default;
        choice.reason = "first default: the best validated candidate (warm e2e " + (e2e ? fmt::format("{:.6f} s", *e2e) : std::string("unmeasured")) + ")";
        return choice;
    }
    std::vector<Contender> winners;
    std::vector<std::string> holds;
    for (const auto& c : validated) {
        Decision d = decide(c, current, thresholds, state);
        if (d.action == Action::promote) winners.push_back(c);
        else holds.push_back(c.recipe_id + ": " + d.reason);
        choice.decisions.emplace_back(c, std::move(d));
    }
    const auto best = best_of(winners);
    if (!best) return hold(PromotionCondition::holding, fmt::format("{}", fmt::join(holds, " | ")));
    for (const auto& [c, d] : choice.decisions)
        if (c.revision_id == best->revision_id) choice.reason = "beat the default " + current->recipe_id + " (revision " +
                                                                std::to_string(current->revision_id) + "): " + fmt::format("{}", fmt::join(d.checks, "; "));
    choice.action = Action::promote;
    choice.revision_id = best->revision_id;
    choice.condition = PromotionCondition::beats_default;
    return choice;
}

}  // namespace anvil::qualify
