// The controller's timing rules, as pure values and functions with table tests
// (test_controller_rules.cpp): how long to wait after failures, when a new default that cannot
// serve is rolled back, and the local-time window inside which a qualification may pause the default.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace anvil::qualify {

// first · 2^(failures − 1), capped; no wait before the first failure.
struct Backoff {
    std::chrono::milliseconds first;
    std::chrono::milliseconds cap;
    std::chrono::milliseconds after(int failures) const;
};
// The default's engine that will not start: tried again after 2, 4, 8 … s, at most every minute.
inline constexpr Backoff kServingStartBackoff{std::chrono::seconds(2), std::chrono::seconds(60)};

// A default promoted less than kProbation ago whose engine failed to start kRollbackAfterFailures
// times in a row is rolled back to the one before; an older default is only retried.
inline constexpr auto kProbation = std::chrono::minutes(10);
inline constexpr int kRollbackAfterFailures = 3;
bool rollback_due(std::optional<std::chrono::system_clock::duration> since_promoted, int start_failures);

// "HH:MM-HH:MM" in local time; it may wrap midnight ("22:00-02:00"); the two ends differ.
struct ExclusiveWindow {
    int from_minute = 0;  // minutes since local midnight, inclusive
    int to_minute = 0;    // exclusive
    bool contains(int minute_of_day) const;
    std::string str() const;
};
std::optional<ExclusiveWindow> parse_exclusive_window(std::string_view text);

}  // namespace anvil::qualify
