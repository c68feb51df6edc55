#include "state/records.hpp"

#include <chrono>
#include <ctime>

namespace anvil::state {

std::string_view to_string(EvidenceClass c) { return c == EvidenceClass::local ? "local" : "external-prior"; }

std::string_view to_string(GateResult r) {
    switch (r) {
        case GateResult::pass: return "pass";
        case GateResult::fail: return "fail";
        case GateResult::unknown: return "unknown";
    }
    return "unknown";
}

std::optional<FeedCursor> FeedCursor::parse(const std::string& text) {
    auto dot = text.find('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == text.size()) return std::nullopt;
    auto digits = [](const std::string& s) { return s.size() <= 18 && s.find_first_not_of("0123456789") == std::string::npos; };
    const std::string a = text.substr(0, dot), b = text.substr(dot + 1);
    if (!digits(a) || !digits(b)) return std::nullopt;
    return FeedCursor{std::stoll(a), std::stoll(b)};
}

std::string now_iso8601() {
    using namespace std::chrono;
    const auto now = system_clock::now();
    const std::time_t seconds = system_clock::to_time_t(now);
    const auto millis = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
    char out[40];
    std::snprintf(out, sizeof out, "%s.%03dZ", text, static_cast<int>(millis));
    return out;
}

}  // namespace anvil::state
