// The pass's promotion step. In: the validated revisions at the synced commit, the current
// default, each one's local measurements and hard-gate verdicts, the pin, the freeze and the last
// promotion (the ledger's settings), the thresholds. qualify::choose_promotion owns every rule; this
// step gathers its inputs, records each candidate's decision, and carries out a promotion it
// chose (a pin's too: the API only records the pin). Out: the Promotion condition, and at most one
// promotion.
#include "daemon/controller/reconciler.hpp"
#include "daemon/qualify/metrics_catalogue.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "support/clock.hpp"
#include "daemon/controller/revision_document.hpp"
#include "state/gate_table.hpp"

namespace anvil::daemon {

using state::Status;
using json = nlohmann::json;

qualify::Contender Reconciler::contender(const state::RevisionRow& revision) const {
    qualify::Contender c;
    c.revision_id = revision.id;
    c.recipe_id = revision.recipe_id;
    const auto detail = store_.recipe(revision.recipe_id);
    if (!detail) return c;
    c.metrics = state::local_measurements(*detail, revision.id);
    // Its quality was compared with the default its newest quality measurement names.
    for (const auto& e : detail->evidence)
        if (e.revision_id == revision.id && e.evidence_class == state::EvidenceClass::local && e.min && e.metric == qualify::metric::relative_quality_loss.name)
            c.control_revision_id = e.control_revision_id;
    std::map<std::string, bool> gates;
    for (const auto& v : detail->verdicts)
        if (v.revision_id == revision.id && v.gate != "feasibility") gates[v.gate] = v.result == state::GateResult::pass;
    c.hard_gates_passed = state::hard_gates_passed(gates);
    return c;
}

qualify::PolicyState Reconciler::policy_state() const {
    qualify::PolicyState policy;
    policy.policy = config_.promotion.policy;
    policy.min_interval = config_.promotion.min_interval;
    policy.now = clock_->system();
    if (const auto pin = store_.pin()) policy.pin = qualify::Pin{pin->recipe_id, pin->revision_id, pin->actor};
    if (const auto freeze = store_.freeze()) policy.freeze = qualify::Freeze{freeze->actor, freeze->reason};
    if (const auto last = store_.last_promotion()) policy.last_promotion = support::parse_utc(last->at);
    return policy;
}

void Reconciler::promote(const state::RevisionRow& revision, const std::string& reason, const std::string& actor) {
    const auto previous = store_.current_default(revision.serving_slot);
    const auto detail = store_.recipe(revision.recipe_id);
    std::vector<state::Id> evidence, verdicts;
    if (detail) {
        for (const auto& e : detail->evidence)
            if (e.revision_id == revision.id && e.evidence_class == state::EvidenceClass::local) evidence.push_back(e.id);
        for (const auto& v : detail->verdicts)
            if (v.revision_id == revision.id && v.gate != "feasibility") verdicts.push_back(v.id);
    }
    store_.promote(revision.id, reason, actor, evidence, verdicts);
    store_.set_last_promotion({revision.id, revision.recipe_id, now_text(), previous ? std::optional(previous->id) : std::nullopt}, actor);
    spdlog::info("promoted {} revision {}: {}", revision.recipe_id, revision.id, reason);
    wake();
}

Reconciler::PromotionPicture Reconciler::promotion_picture() const {
    PromotionPicture p;
    p.current = store_.current_default();
    p.validated = store_.latest_revisions_with_status(Status::validated, 1000);
    // Only what is at the synced commit may become the default.
    std::erase_if(p.validated, [this](const state::RevisionRow& r) { return not_in_registry(r).has_value(); });
    for (const auto& r : p.validated) p.contenders.push_back(contender(r));
    if (p.current) p.control = contender(*p.current);
    p.thresholds = promotion_thresholds(config_);
    p.policy = policy_state();
    p.choice = qualify::choose_promotion(p.contenders, p.control, p.thresholds, p.policy);
    for (const auto& c : p.contenders) p.decisions.push_back(qualify::decide(c, p.control, p.thresholds, p.policy));
    return p;
}

void Reconciler::promotion_step() {
    const auto picture = promotion_picture();
    const auto& current = picture.current;
    const auto& validated = picture.validated;
    const auto& choice = picture.choice;
    for (const auto& [c, d] : choice.decisions)
        note("decision:" + std::to_string(c.revision_id), c.recipe_id, std::string(qualify::to_string(d.action)) + ": " + d.reason);
    if (choice.action != qualify::Action::promote || !choice.revision_id) {
        set_condition("Promotion", true, std::string(qualify::to_string(choice.condition)), choice.reason);
        return;
    }

    std::optional<state::RevisionRow> target;
    if (auto it = std::find_if(validated.begin(), validated.end(), [&](const auto& r) { return r.id == *choice.revision_id; }); it != validated.end())
        target = *it;
    else
        target = store_.revision(*choice.revision_id);  // a pin may name a revision that is no longer validated
    if (!target) {
        set_condition("Promotion", false, "PinUnavailable", "the pinned revision " + std::to_string(*choice.revision_id) + " is not in the ledger");
        return;
    }
    if (const auto why = not_in_registry(*target)) {
        set_condition("Promotion", false, "PinUnavailable", "the pinned " + target->recipe_id + " cannot be promoted: it was " + *why);
        return;
    }
    // Replacing a default on measurements needs somewhere to roll back to: the current default
    // must be able to start again, or the switch is not made. Checked only when a switch is due (it
    // hashes the model directory).
    if (current && choice.condition == qualify::PromotionCondition::beats_default) {
        if (auto current_doc = document_of(*current)) {
            if (auto why = engines_->startable(*current_doc->recipe())) {
                set_condition("Promotion", false, "RollbackUnavailable",
                              "the current default " + current->recipe_id + " could not be restarted for a rollback: " + *why);
                return;
            }
        }
    }
    try {
        promote(*target, choice.reason, choice.actor);
    } catch (const state::TransitionRefused& e) {
        set_condition("Promotion", false, "PromotionRefused", e.what());
        return;
    }
    set_condition("Promotion", true, std::string(qualify::to_string(choice.condition)), choice.reason);
}

void Reconciler::rollback(const std::string& why) {
    const auto last = store_.last_promotion();
    if (!last || !last->previous_revision_id) {
        set_condition("DefaultServing", false, "NoRollbackTarget", why + "; there is no previous default to roll back to");
        return;
    }
    const state::Id previous_id = *last->previous_revision_id;
    const auto previous = store_.revision(previous_id);
    if (!previous) return;
    if (const auto gone = not_in_registry(*previous)) {
        set_condition("DefaultServing", false, "NoRollbackTarget", why + "; the previous default " + previous->recipe_id + " cannot come back: it was " + *gone);
        return;
    }
    try {
        promote(*previous, "rollback: " + why, "reconciler");
        store_.append_event("rollback", previous->recipe_id, "rolled back to revision " + std::to_string(previous_id) + ": " + why);
        // A pin on what could not serve no longer holds: the operator is told by the freeze below.
        if (const auto pin = store_.pin(); pin && pin->recipe_id != previous->recipe_id) store_.clear_pin("reconciler");
        // Hold automatic promotion until someone looks: the same candidate would win again.
        store_.set_freeze({"automatic rollback: " + why, "reconciler", now_text()});
    } catch (const std::exception& e) {
        set_condition("DefaultServing", false, "RollbackFailed", why + "; rollback refused: " + e.what());
    }
}

}  // namespace anvil::daemon
