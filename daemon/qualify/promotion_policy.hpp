// The promotion decision, as a pure function of measured evidence: whether a validated candidate
// should replace the current default (the control), hold, or be passed over, and why.
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

struct PolicyState {
    std::string policy = "auto";  // auto | manual
    bool frozen = false;
    std::optional<std::string> pinned_recipe;  // a manual pin always wins
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

// With no control, the best of `candidates` by warm e2e time is promoted (hard gates passed).
// With a control, `candidate` is promoted only when every threshold passes with the margin;
// missing measurements hold ("inconclusive: … not measured").
Decision decide(const Contender& candidate, const std::optional<Contender>& control, const Thresholds& thresholds,
                const PolicyState& state);

// Among validated contenders with passed hard gates, the one promotion would pick first: the best
// warm e2e time, ties broken by tasks per hour, then by recipe id (deterministic).
std::optional<Contender> best_of(const std::vector<Contender>& contenders);

}  // namespace anvil::qualify
