// The controller's rules as tables (daemon/qualify/controller_rules.hpp, registry/weights_precision.hpp):
// backoff after failures, rollback within the probation, the exclusive window, and the weights
// precision candidates are ordered by.
#include <catch2/catch.hpp>

#include "daemon/qualify/controller_rules.hpp"
#include "registry/weights_precision.hpp"

using namespace std::chrono_literals;
using anvil::qualify::Backoff;

TEST_CASE("backoff doubles from its first wait up to its cap, and waits nothing before a failure", "[controller][rules]") {
    const struct {
        Backoff backoff;
        int failures;
        std::chrono::milliseconds wait;
    } rows[] = {
        {anvil::qualify::kServingStartBackoff, 0, 0ms},     {anvil::qualify::kServingStartBackoff, 1, 2s},
        {anvil::qualify::kServingStartBackoff, 2, 4s},      {anvil::qualify::kServingStartBackoff, 5, 32s},
        {anvil::qualify::kServingStartBackoff, 6, 60s},     {anvil::qualify::kServingStartBackoff, 1000, 60s},
        {Backoff{30s, 3600s}, 1, 30s},                      {Backoff{30s, 3600s}, 3, 120s},
        {Backoff{30s, 3600s}, 8, 3600s},                    {Backoff{30s, 3600s}, -1, 0ms},
    };
    for (const auto& row : rows) {
        INFO(row.failures << " failures");
        CHECK(row.backoff.after(row.failures) == row.wait);
    }
}

TEST_CASE("a default is rolled back only when it failed three starts inside its probation", "[controller][rules]") {
    using anvil::qualify::rollback_due;
    const std::optional<std::chrono::system_clock::duration> none;
    CHECK(rollback_due(1min, 3));
    CHECK_FALSE(rollback_due(1min, 2));
    CHECK_FALSE(rollback_due(10min, 3));  // the probation is over: retried, never rolled back
    CHECK_FALSE(rollback_due(none, 5));   // not the latest promotion, or its time unknown
    CHECK(rollback_due(9min + 59s, 4));
}

TEST_CASE("the exclusive window: parsed once, wrapping midnight, its end excluded", "[controller][rules]") {
    using anvil::qualify::parse_exclusive_window;
    const auto night = parse_exclusive_window("22:00-02:30");
    REQUIRE(night);
    CHECK(night->str() == "22:00-02:30");
    CHECK(night->contains(22 * 60));
    CHECK(night->contains(23 * 60 + 59));
    CHECK(night->contains(0));
    CHECK(night->contains(2 * 60 + 29));
    CHECK_FALSE(night->contains(2 * 60 + 30));
    CHECK_FALSE(night->contains(12 * 60));
    const auto day = parse_exclusive_window("02:00-05:00");
    REQUIRE(day);
    CHECK(day->contains(2 * 60));
    CHECK_FALSE(day->contains(5 * 60));
    CHECK_FALSE(day->contains(60));
    for (const char* bad : {"", "2:00-05:00", "02:00-05:00 ", "24:00-01:00", "02:60-03:00", "03:00-03:00", "02:00_05:00", "ab:cd-ef:gh"}) {
        INFO(bad);
        CHECK_FALSE(parse_exclusive_window(bad));
    }
}

TEST_CASE("weights precision: each spelling from one table, the launch's flags before the model's dtype", "[controller][rules]") {
    using anvil::registry::WeightsPrecision;
    using anvil::registry::weights_precision;
    using anvil::registry::weights_spelling;
    const struct {
        std::vector<std::string> arguments;
        std::optional<std::string> dtype;
        WeightsPrecision precision;
    } rows[] = {
        {{"serve", "--weights", "f32"}, "bf16", WeightsPrecision::f32},
        {{"serve", "--weights=q8"}, std::nullopt, WeightsPrecision::eight_bit},
        {{"serve", "--weights", "f32", "--weights", "bf16"}, std::nullopt, WeightsPrecision::half},  // the last one counts
        {{"serve", "--weights", "stored"}, "F32", WeightsPrecision::f32},                               // as the file holds them
        {{"serve"}, "q4_k_m", WeightsPrecision::fewer_bits},
        {{"--dtype", "auto", "--quantization", "awq"}, std::nullopt, WeightsPrecision::fewer_bits},   // quantization decides
        {{"--dtype", "bfloat16"}, std::nullopt, WeightsPrecision::half},
        {{"--quantization", "fp8"}, std::nullopt, WeightsPrecision::eight_bit},
        {{"--dtype", "q3_k_xs8"}, std::nullopt, WeightsPrecision::unknown},  // no guessing from a digit
        {{"serve"}, std::nullopt, WeightsPrecision::unstated},
    };
    for (const auto& row : rows) {
        const auto spelling = weights_spelling(row.arguments, row.dtype);
        INFO(spelling.value_or("(none)"));
        CHECK(weights_precision(spelling) == row.precision);
    }
}
