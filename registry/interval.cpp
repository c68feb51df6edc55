#include "registry/interval.hpp"

#include <charconv>
#include <cmath>
#include <limits>

namespace anvil::registry {

namespace {

using Bound = std::optional<std::int64_t>;

std::int64_t checked_add(std::int64_t a, std::int64_t b) {
    std::int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        throw ArithmeticOverflow(std::to_string(a) + " + " + std::to_string(b) + " does not fit in 64 bits");
    return r;
}

std::int64_t checked_sub(std::int64_t a, std::int64_t b) {
    std::int64_t r;
    if (__builtin_sub_overflow(a, b, &r))
        throw ArithmeticOverflow(std::to_string(a) + " - " + std::to_string(b) + " does not fit in 64 bits");
    return r;
}

std::int64_t checked_mul(std::int64_t a, std::int64_t b) {
    std::int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        throw ArithmeticOverflow(std::to_string(a) + " * " + std::to_string(b) + " does not fit in 64 bits");
    return r;
}

// Rounds toward negative infinity, where C++ division truncates toward zero.
std::int64_t floor_div(std::int64_t a, std::int64_t b) {
    std::int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
}

template <typename F>
Bound both(const Bound& a, const Bound& b, F f) {
    if (!a || !b) return std::nullopt;
    return f(*a, *b);
}

void require_non_negative(const IntInterval& i, const char* what) {
    if ((i.min && *i.min < 0) || (i.max && *i.max < 0))
        throw std::invalid_argument(std::string(what) + " needs non-negative bounds, got " + to_string(i));
}

double down(double v) { return std::nextafter(v, -std::numeric_limits<double>::infinity()); }
double up(double v) { return std::nextafter(v, std::numeric_limits<double>::infinity()); }

// The rounding error of a − b (Knuth's TwoSum): zero exactly when the subtraction was exact.
double subtraction_error(double a, double b, double difference) {
    double bb = difference - a;
    return (a - (difference - bb)) + (-b - bb);
}

}  // namespace

IntInterval operator+(const IntInterval& a, const IntInterval& b) {
    return {both(a.min, b.min, checked_add), both(a.max, b.max, checked_add)};
}

IntInterval operator-(const IntInterval& a, const IntInterval& b) {
    return {both(a.min, b.max, checked_sub), both(a.max, b.min, checked_sub)};
}

IntInterval operator*(const IntInterval& a, const IntInterval& b) {
    require_non_negative(a, "interval multiplication");
    require_non_negative(b, "interval multiplication");
    return {both(a.min, b.min, checked_mul), both(a.max, b.max, checked_mul)};
}

IntInterval floor_divide(const IntInterval& a, const IntInterval& b) {
    require_non_negative(b, "interval division");
    IntInterval out;
    // The smallest quotient pairs the smallest dividend with the largest divisor when that dividend
    // is non-negative, and with the smallest divisor when it is negative; the largest mirrors it.
    if (a.min) {
        const Bound& d = *a.min >= 0 ? b.max : b.min;
        if (d && *d > 0) out.min = floor_div(*a.min, *d);
    }
    if (a.max) {
        const Bound& d = *a.max >= 0 ? b.min : b.max;
        if (d && *d > 0) out.max = floor_div(*a.max, *d);
    }
    return out;
}

RatioInterval operator/(const RatioInterval& a, const RatioInterval& b) {
    auto divide = [](double x, double y, bool lower) -> std::optional<double> {
        if (y <= 0.0) return std::nullopt;
        double q = x / y;
        if (!std::isfinite(q)) return std::nullopt;
        if (std::fma(q, y, -x) == 0.0) return q;
        return lower ? down(q) : up(q);
    };
    RatioInterval out;
    if (a.min && b.max) out.min = divide(*a.min, *b.max, true);
    if (a.max && b.min) out.max = divide(*a.max, *b.min, false);
    return out;
}

RatioInterval one_minus(const RatioInterval& a) {
    auto subtract = [](double x, bool lower) {
        double d = 1.0 - x;
        if (subtraction_error(1.0, x, d) == 0.0) return d;
        return lower ? down(d) : up(d);
    };
    RatioInterval out;
    if (a.max) out.min = subtract(*a.max, true);
    if (a.min) out.max = subtract(*a.min, false);
    return out;
}

Outcome compare(const IntInterval& actual, Comparison c, const IntInterval& required) {
    if (c == Comparison::at_least) {
        if (actual.max && required.min && *actual.max < *required.min) return Outcome::fail;
        if (actual.min && required.max && *actual.min >= *required.max) return Outcome::pass;
    } else {
        if (actual.min && required.max && *actual.min > *required.max) return Outcome::fail;
        if (actual.max && required.min && *actual.max <= *required.min) return Outcome::pass;
    }
    return Outcome::unknown;
}

Outcome compare(const RatioInterval& actual, Comparison c, const RatioInterval& required, double tolerance) {
    if (c == Comparison::at_least) {
        if (actual.max && required.min && *actual.max < *required.min - tolerance) return Outcome::fail;
        if (actual.min && required.max && *actual.min >= *required.max - tolerance) return Outcome::pass;
    } else {
        if (actual.min && required.max && *actual.min > *required.max + tolerance) return Outcome::fail;
        if (actual.max && required.min && *actual.max <= *required.min + tolerance) return Outcome::pass;
    }
    return Outcome::unknown;
}

std::string to_string(double v) {
    char buf[32];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    return ec == std::errc() ? std::string(buf, end) : std::string("?");
}

namespace {
template <typename I, typename F>
std::string render(const I& i, F text) {
    if (i.min && i.max && *i.min == *i.max) return text(*i.min);
    if (!i.min && !i.max) return "?";
    return "[" + (i.min ? text(*i.min) : std::string("?")) + ", " + (i.max ? text(*i.max) : std::string("?")) + "]";
}
}  // namespace

std::string to_string(const IntInterval& i) {
    return render(i, [](std::int64_t v) { return std::to_string(v); });
}

std::string to_string(const RatioInterval& i) {
    return render(i, [](double v) { return to_string(v); });
}

}  // namespace anvil::registry
