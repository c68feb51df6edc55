#include "daemon/controller/operator_requests.hpp"

#include "support/clock.hpp"

namespace anvil::daemon {

using state::Status;

void OperatorRequests::request_qualification(const std::string& recipe_id, const std::string& actor) {
    const auto detail = revisions_.recipe(recipe_id);
    if (!detail) throw RequestRefused(RequestRefused::Why::not_found, "no recipe " + recipe_id);
    const auto& latest = detail->revisions.front();
    if (qualifications_.current() == latest.id) throw RequestRefused(RequestRefused::Why::conflict, recipe_id + " is being qualified now");
    if (latest.status != Status::candidate && latest.status != Status::failed && latest.status != Status::validated)
        throw RequestRefused(RequestRefused::Why::conflict, recipe_id + " is " + std::string(state::to_string(latest.status)) +
                                                  "; only a candidate, failed or validated revision can be qualified");
    if (const auto why = in_registry_(latest))
        throw RequestRefused(RequestRefused::Why::conflict, recipe_id + " revision " + std::to_string(latest.id) + " cannot be qualified: " + *why);
    try {
        revisions_.transition({latest.id, Status::qualifying, "qualification requested by " + actor, actor, {}, {}, std::nullopt});
    } catch (const state::TransitionRefused& e) {
        throw RequestRefused(RequestRefused::Why::conflict, e.what());
    }
    wake_();
}

void OperatorRequests::pin(const std::optional<std::string>& recipe_id, const std::string& actor) {
    if (!recipe_id) {
        if (!settings_.clear_pin(actor)) throw RequestRefused(RequestRefused::Why::conflict, "no recipe is pinned");
        wake_();
        return;
    }
    const auto detail = revisions_.recipe(*recipe_id);
    if (!detail) throw RequestRefused(RequestRefused::Why::not_found, "no recipe " + *recipe_id);
    // The newest revision that has been validated: a pin never serves unqualified weights, nor a
    // revision whose document is not at the synced commit of the registry.
    std::optional<state::RevisionRow> target;
    std::optional<std::string> absent;
    for (const auto& r : detail->revisions)
        if (r.status == Status::validated || r.status == Status::promoted || r.status == Status::retired) {
            if (auto why = in_registry_(r)) {
                if (!absent) absent = "revision " + std::to_string(r.id) + " is " + *why;
                continue;
            }
            target = r;
            break;
        }
    if (!target || target->status == Status::retired) {
        bool ever_validated = false;
        for (const auto& t : detail->history)
            if (target && t.revision_id == target->id && t.to == Status::validated) ever_validated = true;
        if (!ever_validated)
            throw RequestRefused(RequestRefused::Why::conflict, *recipe_id + " has no validated revision in the registry to pin" + (absent ? " (" + *absent + ")" : std::string()));
    }
    // The promotion step promotes it (qualify::choose_promotion: a pin wins over everything).
    settings_.set_pin({*recipe_id, target->id, actor, support::format_utc(clock_.system())});
    wake_();
}

void OperatorRequests::freeze(const std::string& reason, const std::string& actor) {
    settings_.set_freeze({reason.empty() ? std::string("frozen through the API") : reason, actor, support::format_utc(clock_.system())});
    wake_();
}

void OperatorRequests::unfreeze(const std::string& actor) {
    if (!settings_.clear_freeze(actor)) throw RequestRefused(RequestRefused::Why::conflict, "promotion is not frozen");
    wake_();
}

}  // namespace anvil::daemon
