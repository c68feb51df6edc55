// The daemon's engines: picks the driver a recipe's launch kind needs, resolves the launch against
// the configuration (placeholders, allowed roots, port range), checks what the recipe pins (the
// embedded model's and draft model's directory digests; the container driver checks image digests), starts the engine,
// waits until it is ready, records it in the ledger, and finds it again after a restart.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/anvild/config.hpp"
#include "engine/driver/driver.hpp"
#include "state/store.hpp"

namespace anvil::daemon {

struct RunningEngine {
    state::Id row_id = 0;      // engines table
    state::Id revision_id = 0;
    std::string role;          // serving | qualification
    driver::EngineHandle handle;
};

class EngineSupervisor {
public:
    EngineSupervisor(const DaemonConfig& config, state::Store& store);
    ~EngineSupervisor();

    // Why anvild cannot run this recipe at all, judged on paper before anything starts: a launch kind
    // it does not run, loader variables in the environment, model paths or mount sources outside
    // the allowed roots (driver::paper_refusal). One line, or nothing.
    std::optional<std::string> unsupported(const registry::Recipe& recipe) const;
    // Whether the revision could start now: launch resolves, model (and draft model) present with the pinned digest,
    // the engine binary exists. The reason when it could not (a rollback target is checked with it).
    std::optional<std::string> startable(const registry::Recipe& recipe) const;
    // The directory a recipe's model block names (launch.model or launch.draft.model), its
    // placeholders expanded and inside the allowed roots, as a launch would place it. Throws
    // driver::LaunchError naming `where` ("/launch/model/path") when it cannot be placed.
    std::filesystem::path model_directory(const registry::ModelRef& model, const std::string& where) const;

    // Starts, waits until ready, records. Throws driver::EngineError / LaunchError with the reason.
    // `cancelled`: see driver::wait_ready; the engine is stopped and StartCancelled thrown.
    RunningEngine start(state::Id revision_id, const registry::Recipe& recipe, const std::string& role,
                        const std::atomic<bool>* cancelled = nullptr);
    void stop(const RunningEngine& engine, std::chrono::milliseconds grace = std::chrono::seconds(10));
    // Probes every tracked engine; records and forgets those that exited. Returns the ones that exited.
    std::vector<RunningEngine> check();
    // Engines of an earlier anvild that still run are tracked again; records of ones that are gone
    // are closed in the ledger; engines nobody recorded are stopped.
    void adopt();

    std::vector<RunningEngine> engines() const;
    std::optional<RunningEngine> serving_for(state::Id revision_id) const;

private:
    driver::Driver& driver_for(const std::string& launch_kind);

    const DaemonConfig& config_;
    state::Store& store_;
    std::map<std::string, std::unique_ptr<driver::Driver>> drivers_;  // embedded | process | container
    mutable std::mutex mutex_;
    std::vector<RunningEngine> engines_;
};

// The driver a launch kind runs on: embedded, native → process, docker → container; else empty.
std::string driver_kind_for(const std::string& launch_kind);

}  // namespace anvil::daemon
