// anvild's controller wired as production runs it: the real engine supervisor, the qualification
// runner (whose registry check asks the controller once it exists) and the system clock, behind
// the ports the Reconciler acts through. main, the HTTP fuzz target and bench_daemon build it here;
// the controller's tests give fakes instead.
#pragma once

#include <memory>

#include "daemon/config/config.hpp"
#include "daemon/controller/controller_ports.hpp"
#include "daemon/controller/daemon_metrics.hpp"
#include "daemon/controller/reconciler.hpp"
#include "daemon/drivers/engine_supervisor.hpp"
#include "daemon/endpoint/stable_endpoint.hpp"
#include "state/store.hpp"

namespace anvil::daemon {

class ProductionController {
public:
    ProductionController(const DaemonConfig& config, state::Store& store, endpoint::UpstreamSwitch& endpoint, DaemonMetrics& metrics);
    // Cuts a running qualification short and waits for it before the controller it asks goes.
    ~ProductionController() { qualifications_.cancel_and_wait(); }
    ProductionController(const ProductionController&) = delete;
    ProductionController& operator=(const ProductionController&) = delete;
    Reconciler& reconciler() { return *reconciler_; }

private:
    drivers::EngineSupervisor engines_;
    RunnerQualifications qualifications_;
    SystemClock clock_;
    // Declared last, destroyed first: its destructor waits for the runner, which is still there.
    std::unique_ptr<Reconciler> reconciler_;
};

}  // namespace anvil::daemon
