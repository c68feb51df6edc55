// Interval arithmetic: for random intervals around random true values, every bound the operations
// produce contains the true result, and a bound missing from an input stays missing.
#include <catch2/catch.hpp>

#include <random>

#include "registry/interval.hpp"

using namespace anvil::registry;

namespace {

using i128 = __int128;

// A random interval holding `truth`: each bound present with probability 3/4, up to `spread` away.
IntInterval around(std::int64_t truth, std::int64_t spread, std::mt19937_64& rng, bool allow_negative = false) {
    std::uniform_int_distribution<std::int64_t> d(0, spread);
    std::bernoulli_distribution present(0.75);
    IntInterval i;
    if (present(rng)) i.min = allow_negative ? truth - d(rng) : std::max<std::int64_t>(0, truth - d(rng));
    if (present(rng)) i.max = truth + d(rng);
    return i;
}

bool contains(const IntInterval& i, i128 v) { return (!i.min || *i.min <= v) && (!i.max || v <= *i.max); }

RatioInterval around(double truth, std::mt19937_64& rng) {
    std::uniform_real_distribution<double> d(0.0, truth);
    std::bernoulli_distribution present(0.75);
    RatioInterval i;
    if (present(rng)) i.min = truth - d(rng) * 0.5;
    if (present(rng)) i.max = truth + d(rng);
    return i;
}

bool contains(const RatioInterval& i, long double v) { return (!i.min || *i.min <= v) && (!i.max || v <= *i.max); }

constexpr int kTrials = 20000;

}  // namespace

TEST_CASE("interval sums contain the true sum: a bound is present only when both inputs have it", "[interval]") {
    std::mt19937_64 rng(20260829);
    std::uniform_int_distribution<std::int64_t> value(0, std::int64_t{1} << 40);
    for (int t = 0; t < kTrials; ++t) {
        const std::int64_t x = value(rng), y = value(rng);
        const IntInterval a = around(x, 1 << 20, rng), b = around(y, 1 << 20, rng);
        const IntInterval s = a + b;
        REQUIRE(contains(s, i128{x} + y));
        REQUIRE(s.min.has_value() == (a.min && b.min));
        REQUIRE(s.max.has_value() == (a.max && b.max));
    }
}

TEST_CASE("interval differences contain the true difference, negative margins included", "[interval]") {
    std::mt19937_64 rng(1);
    std::uniform_int_distribution<std::int64_t> value(0, std::int64_t{1} << 40);
    for (int t = 0; t < kTrials; ++t) {
        const std::int64_t x = value(rng), y = value(rng);
        const IntInterval a = around(x, 1 << 30, rng), b = around(y, 1 << 30, rng);
        const IntInterval d = a - b;
        REQUIRE(contains(d, i128{x} - y));
        REQUIRE(d.min.has_value() == (a.min && b.max));
        REQUIRE(d.max.has_value() == (a.max && b.min));
    }
}

TEST_CASE("interval products of non-negative factors contain the true product", "[interval]") {
    std::mt19937_64 rng(2);
    std::uniform_int_distribution<std::int64_t> value(0, std::int64_t{1} << 28);
    for (int t = 0; t < kTrials; ++t) {
        const std::int64_t x = value(rng), y = value(rng);
        const IntInterval a = around(x, 1 << 10, rng), b = around(y, 1 << 10, rng);
        const IntInterval p = a * b;
        REQUIRE(contains(p, i128{x} * y));
        REQUIRE(p.min.has_value() == (a.min && b.min));
        REQUIRE(p.max.has_value() == (a.max && b.max));
    }
}

TEST_CASE("floor division bounds contain floor(x / y) for any sign of dividend", "[interval]") {
    std::mt19937_64 rng(3);
    std::uniform_int_distribution<std::int64_t> dividend(-(std::int64_t{1} << 40), std::int64_t{1} << 40);
    std::uniform_int_distribution<std::int64_t> divisor(1, 1 << 20);
    for (int t = 0; t < kTrials; ++t) {
        const std::int64_t x = dividend(rng), y = divisor(rng);
        const IntInterval a = around(x, 1 << 30, rng, true);
        IntInterval b = around(y, 1 << 10, rng);
        const IntInterval q = floor_divide(a, b);
        // floor(x / y) ≥ m exactly when x ≥ m·y, and ≤ M exactly when x < (M + 1)·y (y > 0):
        // checked on the definition rather than on a second implementation of floor.
        if (q.min) REQUIRE(i128{*q.min} * y <= x);
        if (q.max) REQUIRE(i128{x} < (i128{*q.max} + 1) * y);
        if (!a.min) REQUIRE_FALSE(q.min);
        if (!a.max) REQUIRE_FALSE(q.max);
    }
}

TEST_CASE("exact operands give exact results", "[interval]") {
    const IntInterval a = IntInterval::exact(195019721933), b = IntInterval::exact(165000000000);
    CHECK(a - b == IntInterval::exact(30019721933));
    CHECK(floor_divide(a - b, IntInterval::exact(26000)) == IntInterval::exact(1154604));
    CHECK(floor_divide(IntInterval::exact(-7), IntInterval::exact(2)) == IntInterval::exact(-4));
    CHECK(IntInterval::exact(258192) * IntInterval::exact(24000) == IntInterval::exact(6196608000));
}

TEST_CASE("a missing bound is never replaced by zero", "[interval]") {
    const IntInterval only_min{5, std::nullopt};
    CHECK((only_min + IntInterval::exact(0)).max == std::nullopt);
    CHECK((only_min * IntInterval::exact(0)).max == std::nullopt);
    CHECK((IntInterval::exact(10) - only_min).min == std::nullopt);
    CHECK(floor_divide(IntInterval::exact(10), only_min).min == std::nullopt);
    CHECK(floor_divide(IntInterval::exact(10), only_min).max == 2);
    // A divisor that may be zero leaves the quotient unbounded on that side.
    CHECK(floor_divide(IntInterval::exact(10), IntInterval{0, 5}).max == std::nullopt);
    CHECK(floor_divide(IntInterval::exact(10), IntInterval{0, 5}).min == 2);
}

TEST_CASE("exact arithmetic that leaves 64 bits is refused, not wrapped", "[interval]") {
    const IntInterval big = IntInterval::exact(std::int64_t{1} << 62);
    CHECK_THROWS_AS(big * IntInterval::exact(4), ArithmeticOverflow);
    CHECK_THROWS_AS(big + big, ArithmeticOverflow);
    CHECK_THROWS_AS(IntInterval::exact(INT64_MIN) - IntInterval::exact(1), ArithmeticOverflow);
    CHECK_THROWS_AS(IntInterval::exact(-1) * IntInterval::exact(1), std::invalid_argument);
}

TEST_CASE("ratio bounds contain the real quotient and 1 − quotient despite rounding", "[interval]") {
    std::mt19937_64 rng(4);
    std::uniform_real_distribution<double> value(1e-3, 1e3);
    for (int t = 0; t < kTrials; ++t) {
        const double x = value(rng), y = value(rng);
        const RatioInterval a = around(x, rng), b = around(y, rng);
        const RatioInterval q = a / b;
        // long double carries 11 more bits than double: close enough to the real quotient to show
        // a one-ulp outward bound still holds it.
        const long double real = static_cast<long double>(x) / static_cast<long double>(y);
        REQUIRE(contains(q, real));
        REQUIRE(contains(one_minus(q), 1.0L - real));
        if (!a.min || !b.max) REQUIRE_FALSE(q.min);
        if (!a.max || !b.min) REQUIRE_FALSE(q.max);
    }
}

TEST_CASE("exact ratio operations are not widened", "[interval]") {
    CHECK(RatioInterval::exact(6.0) / RatioInterval::exact(8.0) == RatioInterval::exact(0.75));
    CHECK(one_minus(RatioInterval::exact(0.75)) == RatioInterval::exact(0.25));
    const RatioInterval loss = one_minus(RatioInterval::exact(97.0) / RatioInterval::exact(100.0));
    REQUIRE(loss.bounded());
    CHECK(*loss.min < 0.03);
    CHECK(*loss.max > 0.03);
}

TEST_CASE("comparisons decide only when every value in both intervals agrees", "[interval]") {
    std::mt19937_64 rng(5);
    std::uniform_int_distribution<std::int64_t> value(0, 1000);
    std::uniform_int_distribution<std::int64_t> pick(0, 1000);
    for (int t = 0; t < kTrials; ++t) {
        const IntInterval a = around(value(rng), 200, rng), r = around(value(rng), 200, rng);
        for (Comparison c : {Comparison::at_least, Comparison::at_most}) {
            const Outcome o = compare(a, c, r);
            if (o == Outcome::unknown) continue;
            // Any point of each interval (both are bounded once decided on that side) must agree.
            for (int k = 0; k < 4; ++k) {
                const std::int64_t lo_a = a.min.value_or(0), hi_a = a.max.value_or(2000);
                const std::int64_t lo_r = r.min.value_or(0), hi_r = r.max.value_or(2000);
                const std::int64_t x = lo_a + pick(rng) % (hi_a - lo_a + 1);
                const std::int64_t y = lo_r + pick(rng) % (hi_r - lo_r + 1);
                const bool holds = c == Comparison::at_least ? x >= y : x <= y;
                REQUIRE(holds == (o == Outcome::pass));
            }
        }
    }
}

TEST_CASE("comparisons need the bounds their test reads", "[interval]") {
    CHECK(compare(IntInterval{100, std::nullopt}, Comparison::at_least, IntInterval::exact(50)) == Outcome::pass);
    CHECK(compare(IntInterval{std::nullopt, 100}, Comparison::at_least, IntInterval::exact(50)) == Outcome::unknown);
    CHECK(compare(IntInterval{std::nullopt, 10}, Comparison::at_least, IntInterval::exact(50)) == Outcome::fail);
    CHECK(compare(IntInterval{}, Comparison::at_most, IntInterval::exact(50)) == Outcome::unknown);
    CHECK(compare(RatioInterval::exact(0.0300000001), Comparison::at_most, RatioInterval::exact(0.03), 1e-9) == Outcome::pass);
    CHECK(compare(RatioInterval::exact(0.031), Comparison::at_most, RatioInterval::exact(0.03), 1e-9) == Outcome::fail);
}

TEST_CASE("intervals print for people", "[interval]") {
    CHECK(to_string(IntInterval::exact(258192)) == "258192");
    CHECK(to_string(IntInterval{12000, std::nullopt}) == "[12000, ?]");
    CHECK(to_string(IntInterval{}) == "?");
    CHECK(to_string(RatioInterval{0.25, 0.5}) == "[0.25, 0.5]");
}
