// Step 3 of the pass: the engines. In: every engine the fleet runs. Out: those that exited are
// forgotten (the serving step starts the default's again) and a serving one's exit is counted and
// recorded as an event.
#include "daemon/controller/reconciler.hpp"

namespace anvil::daemon {

void Reconciler::engine_step() {
    for (const auto& e : engines_->check()) {
        if (e.role == driver::EngineRole::serving) {
            metrics_.record_engine_restart();
            store_.append_event("engine", e.handle.recipe.recipe_id, "serving engine " + e.handle.engine_id + " exited; restarting it");
        }
    }
}

}  // namespace anvil::daemon
