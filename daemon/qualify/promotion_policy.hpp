// Every promotion rule, as pure functions of the ledger's facts: which revision becomes the default
// (choose_promotion: an operator's pin, a freeze, the policy, the first default), and whether one
// validated candidate beats the current default (decide: hard gates, a comparison made against
// this default, thresholds with margin, the minimum interval, the manual policy), and which of
// several winners goes first (best_of). The controller builds the inputs and acts on the answer.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace anvil::qualify {

// One side of the comparison: a revision's local measurements, measured on this machine.
struct Contender {
    std::int64_t revision_id = 0;
    std::string recipe_id;
    bool hard_gates_passed = false;
    // The default its quality and speed were measured against, when it was qualified with one.
    std::optional<std::int64_t> control_revision_id;
    // warm_e2e_seconds, tasks_per_hour, relative_quality_loss (candidates), and anything else measured.
    std::map<std::string, double> metrics;
};

struct Thresholds {
    double min_deterministic_pass_rate = 1.0;
    double max_relative_quality_loss = 0.03;
    double min_warm_e2e_gain = 0.25;        // candidate e2e must be this much faster: 1 - cand/control
    double min_tasks_per_hour_ratio = 1.0;  // candidate tasks/h ÷ control tasks/h
    double margin = 0.02;                   // added to each threshold so noise cannot flip it back
};

enum class Policy { automatic, manual };
std::string_view to_string(Policy p);  // "auto" | "manual", as configuration and the API spell it
std::optional<Policy> parse_policy(std::string_view text);

// An operator's pin: this revision is the default until unpinned, whatever the measurements say.
struct Pin {
    std::string recipe_id;
    std::int64_t revision_id = 0;
    std::string actor;
};

// An operator's (or a rollback's) freeze: nothing is promoted automatically until unfrozen.
struct Freeze {
    std::string actor;
    std::string reason;
};

struct PolicyState {
    Policy policy = Policy::automatic;
    std::optional<Freeze> freeze;
    std::optional<Pin> pin;  // wins over freeze, policy and thresholds
    std::optional<std::chrono::system_clock::time_point> last_promotion;
    std::chrono::seconds min_interval{300};
    std::chrono::system_clock::time_point now = std::chrono::system_clock::now();
};

enum class Action { promote, hold, pass_over };
std::string_view to_string(Action a);

struct Decision {
    Action action = Action::hold;
    std::string reason;               // one line, for status and the ledger
    std::vector<std::string> checks;  // every threshold compared, with the numbers
};

// The numbers a candidate is judged by against a control, each absent when not measured: its
// relative quality loss (measured against its own control), the warm e2e gain 1 - cand/control and
// the tasks-per-hour ratio cand/control. decide() compares these with the thresholds; the API
// shows them (GET /api/v1/decisions).
struct Comparison {
    std::optional<double> relative_quality_loss;
    std::optional<double> warm_e2e_gain;
    std::optional<double> tasks_per_hour_ratio;
};
Comparison compare_with(const Contender& candidate, const Contender& control);

// One validated candidate against the current default (`control`; none: there is no default yet).
// Failed hard gates pass it over; with a control it must have been measured against that control
// ("inconclusive" otherwise) and pass every threshold with the margin, then the minimum interval;
// missing measurements hold as inconclusive. Pins, freezes and the policy are choose_promotion's.
Decision decide(const Contender& candidate, const std::optional<Contender>& control, const Thresholds& thresholds,
                const PolicyState& state);

// Among validated contenders with passed hard gates, the one promotion would pick first: the best
// warm e2e time, ties broken by tasks per hour, then by recipe id (deterministic).
std::optional<Contender> best_of(const std::vector<Contender>& contenders);

// Why promotion acts or holds this pass; to_string gives the Promotion condition's reason.
enum class PromotionCondition { pinned, frozen, manual, nothing_to_promote, first_default, beats_default, holding };
std::string_view to_string(PromotionCondition c);  // "Pinned" … "Holding"

// What the controller does about the default this pass.
struct PromotionChoice {
    Action action = Action::hold;                // promote: `revision_id` becomes the default
    std::optional<std::int64_t> revision_id;
    std::string actor = "reconciler";            // who the ledger says promoted (a pin: its actor)
    PromotionCondition condition = PromotionCondition::holding;
    std::string reason;                          // one line, for the ledger and the Promotion condition
    std::vector<std::pair<Contender, Decision>> decisions;  // each candidate's own decision, when compared
};

// Precedence: a pin (promote the pinned revision unless it is the default), a freeze (hold), the
// manual policy (hold), no candidate (hold), no default (the best_of the candidates), then each
// candidate decided against the default, and the best_of those that win. `current`: the
// default's contender, if any.
PromotionChoice choose_promotion(const std::vector<Contender>& validated, const std::optional<Contender>& current,
                                 const Thresholds& thresholds, const PolicyState& state);

}  // namespace anvil::qualify
