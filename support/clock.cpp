#include "support/clock.hpp"

#include <cstdio>
#include <ctime>

namespace anvil::support {

namespace {

using std::chrono::system_clock;

struct Parts {
    std::tm utc{};
    int millis = 0;
};

// floor, not truncation: a time before 1970 still gets the second it falls in.
Parts split(system_clock::time_point t) {
    const auto seconds = std::chrono::floor<std::chrono::seconds>(t);
    Parts p;
    p.millis = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(t - seconds).count());
    const std::time_t whole = system_clock::to_time_t(seconds);
    gmtime_r(&whole, &p.utc);
    return p;
}

std::string format(system_clock::time_point t, Precision precision, const char* date_time) {
    const Parts p = split(t);
    char text[64];
    int n = std::snprintf(text, sizeof text, date_time, p.utc.tm_year + 1900, p.utc.tm_mon + 1, p.utc.tm_mday, p.utc.tm_hour,
                          p.utc.tm_min, p.utc.tm_sec);
    if (precision == Precision::milliseconds) n += std::snprintf(text + n, sizeof text - n, ".%03d", p.millis);
    std::snprintf(text + n, sizeof text - n, "Z");
    return text;
}

// Exactly `width` digits at `at`, or -1.
int digits(std::string_view text, std::size_t at, std::size_t width) {
    if (at + width > text.size()) return -1;
    int value = 0;
    for (std::size_t i = at; i < at + width; ++i) {
        if (text[i] < '0' || text[i] > '9') return -1;
        value = value * 10 + (text[i] - '0');
    }
    return value;
}

}  // namespace

std::string format_utc(system_clock::time_point t, Precision precision) {
    return format(t, precision, "%04d-%02d-%02dT%02d:%02d:%02d");
}

std::string utc_now(Precision precision) { return format_utc(system_clock::now(), precision); }

std::string format_utc_compact(system_clock::time_point t, Precision precision) {
    return format(t, precision, "%04d%02d%02dT%02d%02d%02d");
}

std::optional<system_clock::time_point> parse_utc(std::string_view text) {
    // "YYYY-MM-DDTHH:MM:SS": separators at fixed places, digits between.
    if (text.size() < 19 || text[4] != '-' || text[7] != '-' || text[10] != 'T' || text[13] != ':' || text[16] != ':')
        return std::nullopt;
    const int year = digits(text, 0, 4), month = digits(text, 5, 2), day = digits(text, 8, 2);
    const int hour = digits(text, 11, 2), minute = digits(text, 14, 2), second = digits(text, 17, 2);
    if (year < 0 || month < 0 || day < 0 || hour < 0 || hour > 23 || minute < 0 || minute > 59 || second < 0 || second > 59)
        return std::nullopt;
    const std::chrono::year_month_day date{std::chrono::year(year), std::chrono::month(unsigned(month)), std::chrono::day(unsigned(day))};
    if (!date.ok()) return std::nullopt;

    std::size_t at = 19;
    int millis = 0;
    if (at < text.size() && text[at] == '.') {
        const std::size_t first = ++at;
        for (; at < text.size() && text[at] >= '0' && text[at] <= '9'; ++at)
            if (at - first < 3) millis = millis * 10 + (text[at] - '0');
        if (at == first) return std::nullopt;
        for (std::size_t shown = at - first; shown < 3; ++shown) millis *= 10;
    }
    if (at < text.size() && text[at] == 'Z') ++at;
    if (at != text.size()) return std::nullopt;
    return std::chrono::sys_days(date) + std::chrono::hours(hour) + std::chrono::minutes(minute) + std::chrono::seconds(second) +
           std::chrono::milliseconds(millis);
}

}  // namespace anvil::support
