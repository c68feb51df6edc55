#include "daemon/qualify/draft_acceptance.hpp"

#include <cmath>
#include <cstdlib>
#include <map>

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

std::string count(double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%.0f", v);
    return text;
}

}  // namespace

std::optional<DraftCounters> parse_draft_counters(std::string_view exposition) {
    std::map<std::string_view, double> sums;
    while (!exposition.empty()) {
        const std::size_t newline = exposition.find('\n');
        const std::string_view line = exposition.substr(0, newline);
        exposition = newline == std::string_view::npos ? std::string_view() : exposition.substr(newline + 1);
        if (auto s = sample(line)) sums[s->first] += s->second;
    }
    const auto proposed = sums.find("anvil_engine_draft_proposed_tokens_total");
    const auto accepted = sums.find("anvil_engine_draft_accepted_tokens_total");
    const auto verifications = sums.find("anvil_engine_draft_verifications_total");
    if (proposed == sums.end() || accepted == sums.end() || verifications == sums.end()) return std::nullopt;
    return DraftCounters{proposed->second, accepted->second, verifications->second};
}

DraftAcceptance draft_acceptance(const std::optional<DraftCounters>& before, const std::optional<DraftCounters>& after) {
    DraftAcceptance out;
    if (!after) {
        if (before) out.note = "no acceptance figures: the engine's draft counters could not be read after the measurements";
        return out;
    }
    DraftCounters delta = *after;
    if (before) {
        delta = {after->proposed - before->proposed, after->accepted - before->accepted, after->verifications - before->verifications};
        if (delta.proposed < 0 || delta.accepted < 0 || delta.verifications < 0) {
            out.note = "no acceptance figures: the draft counters went backwards during the measurements (the engine restarted?)";
            return out;
        }
    } else {
        out.note = "counted from the engine's start: the draft counters could not be read before the measurements, so the gates' "
                   "requests are included";
    }
    out.measurements.push_back({"draft_proposed_tokens", delta.proposed, "tokens"});
    out.measurements.push_back({"draft_accepted_tokens", delta.accepted, "tokens"});
    if (delta.proposed > 0) out.measurements.push_back({"draft_acceptance_ratio", delta.accepted / delta.proposed, "ratio"});
    if (delta.verifications > 0)
        out.measurements.push_back({"draft_mean_accepted_tokens", delta.accepted / delta.verifications, "tokens"});
    if (delta.proposed <= 0 || delta.verifications <= 0) {
        std::string missing = delta.proposed <= 0 ? "no acceptance ratio" : "";
        if (delta.verifications <= 0) missing += (missing.empty() ? "" : " and ") + std::string("no mean accepted tokens");
        const std::string why = "the draft proposed " + count(delta.proposed) + " tokens in " + count(delta.verifications) +
                                " verifications during the measurements, so " + missing;
        out.note = out.note.empty() ? why : out.note + "; " + why;
    }
    return out;
}

std::optional<DraftCounters> scrape_draft_counters(RunContext& run, const std::string& label) {
    const Exchange x = run.client.get(label, "/metrics");
    if (!x.ok()) return std::nullopt;
    return parse_draft_counters(x.body);
}

}  // namespace anvil::qualify::detail
