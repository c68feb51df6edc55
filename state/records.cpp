#include "state/records.hpp"

#include "support/clock.hpp"

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

std::optional<RecipeOrder> parse_recipe_order(std::string_view text) {
    if (text == "id") return RecipeOrder::id;
    if (text == "status") return RecipeOrder::status;
    if (text == "engine") return RecipeOrder::engine;
    if (text == "hardware") return RecipeOrder::hardware;
    if (text == "verdict") return RecipeOrder::verdict;
    return std::nullopt;
}

std::map<std::string, double> local_measurements(const RecipeDetail& detail, Id revision_id) {
    std::map<std::string, double> out;
    for (const auto& e : detail.evidence)  // oldest first: the newest of each metric stays
        if (e.revision_id == revision_id && e.evidence_class == EvidenceClass::local && e.min) out[e.metric] = registry::to_double(*e.min);
    return out;
}

std::string now_iso8601() { return support::utc_now(support::Precision::milliseconds); }

}  // namespace anvil::state
