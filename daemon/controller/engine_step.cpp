// The pass's engines step. In: every engine the fleet runs. Out: engines of an earlier run
// adopted late (their qualifications stopped: they start over), those that exited forgotten (the
// serving step starts the default's again), and a serving one's exit counted and recorded as an event.
#include "daemon/controller/reconciler.hpp"

namespace anvil::daemon {

void Reconciler::engine_step() {
    // Engines an earlier run left where the fleet could not reach them at start-up (a Slurm
    // cluster whose slurmrestd was down), found now: handled as start_up handles them.
    for (const auto& e : engines_->adopt_pending()) {
        store_.append_event("engine", e.handle.recipe.recipe_id,
                            std::string(drivers::to_string(e.role)) + " engine " + e.handle.engine_id + " of an earlier run adopted");
        if (e.role != drivers::EngineRole::serving) engines_->stop(e, std::chrono::seconds(5));
    }
    for (const auto& e : engines_->check()) {
        if (e.role == drivers::EngineRole::serving) {
            metrics_.record_engine_restart();
            store_.append_event("engine", e.handle.recipe.recipe_id, "serving engine " + e.handle.engine_id + " exited; restarting it");
        }
    }
}

}  // namespace anvil::daemon
