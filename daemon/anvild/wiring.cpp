#include "daemon/anvild/wiring.hpp"

namespace anvil::daemon {

ProductionController::ProductionController(const DaemonConfig& config, state::Store& store, endpoint::UpstreamSwitch& endpoint,
                                           DaemonMetrics& metrics)
    : engines_(supervisor_settings(config), store),
      qualifications_(config, store, engines_,
                      [this](state::Id revision_id) -> std::optional<std::string> {
                          // Jobs run only once the controller exists (it starts them) and are waited for
                          // before it goes (the destructor), so it is there to ask.
                          if (!reconciler_) return "anvild is not running its controller";
                          return reconciler_->not_in_registry(revision_id);
                      }),
      reconciler_(std::make_unique<Reconciler>(config, store, ControllerPorts{engines_, endpoint, qualifications_, clock_}, metrics)) {}

}  // namespace anvil::daemon
