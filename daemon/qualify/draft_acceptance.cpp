#include "daemon/qualify/draft_acceptance.hpp"
#include "daemon/qualify/metrics_catalogue.hpp"

#include <cstdio>

#include "daemon/qualify/metrics_exposition.hpp"

namespace anvil::qualify::detail {

namespace {

std::string count(double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%.0f", v);
    return text;
}

}  // namespace

std::optional<DraftCounters> parse_draft_counters(std::string_view exposition) {
    const auto sums = sum_series(exposition);
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
    out.measurements.push_back({metric::draft_proposed, delta.proposed});
    out.measurements.push_back({metric::draft_accepted, delta.accepted});
    if (delta.proposed > 0) out.measurements.push_back({metric::draft_acceptance_ratio, delta.accepted / delta.proposed});
    if (delta.verifications > 0)
        out.measurements.push_back({metric::draft_mean_accepted, delta.accepted / delta.verifications});
    if (delta.proposed <= 0 || delta.verifications <= 0) {
        std::string missing = delta.proposed <= 0 ? "no acceptance ratio" : "";
        if (delta.verifications <= 0) missing += (missing.empty() ? "" : " and ") + std::string("no mean accepted tokens");
        const std::string why = "the draft proposed " + count(delta.proposed) + " tokens in " + count(delta.verifications) +
                                " verifications during the measurements, so " + missing;
        out.note = out.note.empty() ? why : out.note + "; " + why;
    }
    return out;
}

}  // namespace anvil::qualify::detail
