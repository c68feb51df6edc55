// The pass's serving step. In: the current default, the fleet's serving engines, the stable
// endpoint's upstream. Out: the default's engine running (started with backoff) and the endpoint
// forwarding to it, other serving engines stopped, the DefaultServing condition; a new default
// that cannot start within its probation, or stops answering after the switch, is rolled back.
// Nothing here holds mutex_: a drain or an engine stop takes as long as it takes.
#include "daemon/controller/reconciler.hpp"

#include "daemon/controller/revision_document.hpp"
#include "daemon/qualify/controller_rules.hpp"
#include "support/clock.hpp"

namespace anvil::daemon {

void Reconciler::serving_step() {
    if (memory_.exclusive_qualification) return;  // the qualification step paused the default; it brings it back
    const auto current = store_.current_default();
    if (!current) {
        // The default was retired (removed from the registry) and nothing replaced it: stop
        // admitting, then stop what served it.
        if (endpoint_->current()) endpoint_->switch_to(std::nullopt);
        for (const auto& e : engines_->engines())
            if (e.role == drivers::EngineRole::serving) engines_->stop(e);
        set_condition("DefaultServing", false, "NoDefault", "no recipe is promoted: the stable endpoint answers 503");
        return;
    }
    auto engine = engines_->serving_for(current->id);
    if (!engine) {
        // The serving engine of an earlier run may still be running where the fleet cannot see it
        // yet: a second one would hold the GPUs twice, and the first would be found orphaned.
        if (const auto why = engines_->awaiting_adoption(drivers::EngineRole::serving)) {
            set_condition("DefaultServing", false, "AwaitingAdoption", *why);
            return;
        }
        auto& b = memory_.serving_backoff[current->id];
        if (clock_->steady() < b.next) return;
        auto doc = document_of(*current);
        if (!doc) return;
        try {
            engine = engines_->start(current->id, *doc->recipe(), drivers::EngineRole::serving);
            b = {};
        } catch (const std::exception& e) {
            ++b.failures;
            b.next = clock_->steady() + qualify::kServingStartBackoff.after(b.failures);
            const std::string why = "the default " + current->recipe_id + " could not start (" + std::to_string(b.failures) + " tries): " + e.what();
            set_condition("DefaultServing", false, "EngineFailed", why);
            store_.append_event("engine", current->recipe_id, why);
            const auto last = store_.last_promotion();
            const auto promoted_at = last ? support::parse_utc(last->at) : std::nullopt;
            const auto since_promoted = last && last->revision_id == current->id && promoted_at
                                            ? std::optional(clock_->system() - *promoted_at)
                                            : std::nullopt;
            if (qualify::rollback_due(since_promoted, b.failures)) rollback(why);
            return;
        }
    }
    const auto upstream = endpoint_->current();
    if (!upstream || upstream->engine_id != engine->handle.engine_id) {
        const auto result = endpoint_->switch_to(upstream_of(*engine, current->recipe_id));
        store_.append_event("endpoint", current->recipe_id,
                            "the stable endpoint now forwards to engine " + engine->handle.engine_id + " (drained " +
                                std::to_string(result.drained) + " requests, " + std::to_string(result.still_running) + " still running)");
        // After the switch the new default must still answer as promised; if not, roll back.
        if (!engines_->answers(*engine)) {
            rollback("the new default " + current->recipe_id + " stopped answering /v1/models after the switch");
            return;
        }
    }
    set_condition("DefaultServing", true, "Serving", current->recipe_id + " on engine " + engine->handle.engine_id);
    // Serving engines of anything else go, now that nothing is admitted to them.
    for (const auto& e : engines_->engines())
        if (e.role == drivers::EngineRole::serving && e.revision_id != current->id) engines_->stop(e);
}

}  // namespace anvil::daemon
