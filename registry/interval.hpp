// Closed intervals over the calculator's quantities, each bound optional. A missing bound means
// "not known": it stays missing through every operation and is never read as zero or infinity, so
// an unknown input can decide nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace anvil::registry {

// Exact arithmetic that would leave 64 bits. Such a number is a wrong unit or a typo in a
// document, never something to round, so the operation refuses it.
struct ArithmeticOverflow : std::overflow_error {
    using std::overflow_error::overflow_error;
};

// Bytes, tokens and sequences: exact integers.
struct IntInterval {
    std::optional<std::int64_t> min;
    std::optional<std::int64_t> max;

    static IntInterval exact(std::int64_t v) { return {v, v}; }
    bool bounded() const { return min.has_value() && max.has_value(); }
    friend bool operator==(const IntInterval&, const IntInterval&) = default;
};

IntInterval operator+(const IntInterval& a, const IntInterval& b);
// [a.min − b.max, a.max − b.min]; the result may be negative (a margin below zero).
IntInterval operator-(const IntInterval& a, const IntInterval& b);
// For factors whose present bounds are non-negative (counts and sizes); throws
// std::invalid_argument otherwise, since corner-free bounds would then be wrong.
IntInterval operator*(const IntInterval& a, const IntInterval& b);
// floor(a / b) for a divisor whose present bounds are non-negative; any sign of dividend. A side
// that would divide by zero (an unbounded quotient) is left missing.
IntInterval floor_divide(const IntInterval& a, const IntInterval& b);

// Ratios, scores and seconds: doubles. Every inexact operation moves its bounds outward by one
// ulp, so a bound still contains the real-number result.
struct RatioInterval {
    std::optional<double> min;
    std::optional<double> max;

    static RatioInterval exact(double v) { return {v, v}; }
    bool bounded() const { return min.has_value() && max.has_value(); }
    friend bool operator==(const RatioInterval&, const RatioInterval&) = default;
};

// a / b for non-negative operands; a zero divisor bound leaves that side missing.
RatioInterval operator/(const RatioInterval& a, const RatioInterval& b);
// 1 − a.
RatioInterval one_minus(const RatioInterval& a);

enum class Comparison { at_least, at_most };
enum class Outcome { pass, fail, unknown };

// At least: fail when actual.max < required.min, pass when actual.min ≥ required.max; at most
// mirrors it. Anything else, or a bound either test needs and lacks, is unknown.
Outcome compare(const IntInterval& actual, Comparison c, const IntInterval& required);
// The same with `tolerance` in the actual's favour: decimal thresholds such as 0.03 have no exact
// binary form, and a loss of exactly 3 % must not fail a 3 % limit on rounding alone.
Outcome compare(const RatioInterval& actual, Comparison c, const RatioInterval& required, double tolerance);

// "258192", "[164196608000, 171712992000]", "[12000, ?]", "?" — for reasons people read.
std::string to_string(const IntInterval& i);
std::string to_string(const RatioInterval& i);
std::string to_string(double v);  // shortest text that reads back as the same double

}  // namespace anvil::registry
