#include "daemon/qualify/metrics_exposition.hpp"

#include <cmath>
#include <cstdlib>
#include <utility>

namespace anvil::qualify::detail {

namespace {

std::string_view trim_left(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    return s;
}

// One sample line, `name{labels} value [timestamp]`: its name and value, or nothing for a line
// that is not one (comments, blank lines, anything malformed).
std::optional<std::pair<std::string_view, double>> sample(std::string_view line) {
    line = trim_left(line);
    if (line.empty() || line.front() == '#') return std::nullopt;
    std::size_t end = 0;
    while (end < line.size() && line[end] != '{' && line[end] != ' ' && line[end] != '\t') ++end;
    const std::string_view name = line.substr(0, end);
    std::string_view rest = line.substr(end);
    if (!rest.empty() && rest.front() == '{') {
        // Label values are quoted and may hold '}' or an escaped quote: skip to the real close.
        bool quoted = false;
        std::size_t i = 1;
        for (; i < rest.size(); ++i) {
            const char c = rest[i];
            if (quoted && c == '\\') ++i;
            else if (c == '"') quoted = !quoted;
            else if (!quoted && c == '}') break;
        }
        if (i >= rest.size()) return std::nullopt;
        rest = rest.substr(i + 1);
    }
    rest = trim_left(rest);
    std::size_t value_end = 0;
    while (value_end < rest.size() && rest[value_end] != ' ' && rest[value_end] != '\t' && rest[value_end] != '\r') ++value_end;
    const std::string value(rest.substr(0, value_end));
    if (name.empty() || value.empty()) return std::nullopt;
    char* parsed_end = nullptr;
    const double v = std::strtod(value.c_str(), &parsed_end);
    if (parsed_end != value.c_str() + value.size() || !std::isfinite(v)) return std::nullopt;
    return std::pair{name, v};
}

}  // namespace

std::map<std::string, double, std::less<>> sum_series(std::string_view exposition) {
    std::map<std::string, double, std::less<>> sums;
    while (!exposition.empty()) {
        const std::size_t newline = exposition.find('\n');
        const std::string_view line = exposition.substr(0, newline);
        exposition = newline == std::string_view::npos ? std::string_view() : exposition.substr(newline + 1);
        if (auto s = sample(line)) {
            const auto it = sums.find(s->first);
            if (it == sums.end()) sums.emplace(std::string(s->first), s->second);
            else it->second += s->second;
        }
    }
    return sums;
}

std::optional<std::string> scrape_metrics(RunContext& run, const std::string& label) {
    Exchange x = run.client.get(label, "/metrics");
    if (!x.ok()) return std::nullopt;
    return std::move(x.body);
}

}  // namespace anvil::qualify::detail
