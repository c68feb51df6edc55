// anvild's engines: picks the driver a recipe's launch kind needs, resolves the launch against
// the daemon's settings (placeholders, allowed roots, port range), checks what the recipe pins (the
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

#include "daemon/drivers/driver.hpp"
#include "daemon/drivers/engine_fleet.hpp"
#include "daemon/drivers/launch_resolution.hpp"
#include "daemon/drivers/slurm_rest.hpp"
#include "state/ledger.hpp"

namespace anvil::drivers {

// What the supervisor needs from the daemon's configuration.
struct SupervisorSettings {
    std::filesystem::path data_dir;  // engines/ and containers/ state live under it
    std::filesystem::path engine_binary;  // anvil-engine; empty: the one installed beside the running binary
    std::string container_runtime = "podman";
    std::vector<std::string> container_runtime_arguments;
    std::filesystem::path container_api_socket;
    LaunchConfig launch;  // placeholders, allowed roots, port range, ready timeout
    // Set: embedded and native engines run as jobs of this Slurm cluster (slurm_driver), not here.
    std::optional<SlurmPlacement> slurm;
};

class EngineSupervisor final : public EngineFleet {
public:
    EngineSupervisor(SupervisorSettings settings, state::EngineLedger& engines);  // the ledger: engines only
    ~EngineSupervisor();

    // Why anvild cannot run this recipe at all, judged on paper before anything starts: a launch kind
    // it does not run, loader variables in the environment, model paths or mount sources outside
    // the allowed roots (paper_refusal). One line, or nothing.
    std::optional<std::string> unsupported(const registry::Recipe& recipe) const override;
    // Whether the revision could start now: launch resolves, model (and draft model) present with the pinned digest,
    // the engine binary exists. The reason when it could not (a rollback target is checked with it).
    std::optional<std::string> startable(const registry::Recipe& recipe) const override;
    // The directory a recipe's model block names (launch.model or launch.draft.model), its
    // placeholders expanded and inside the allowed roots, as a launch would place it. Throws
    // LaunchError naming `where` ("/launch/model/path") when it cannot be placed.
    std::filesystem::path model_directory(const registry::ModelRef& model, const std::string& where) const override;

    // Starts, waits until ready, records. Throws EngineError / LaunchError with the reason.
    // `cancelled`: see wait_ready; the engine is stopped and StartCancelled thrown.
    RunningEngine start(state::Id revision_id, const registry::Recipe& recipe, EngineRole role,
                        const std::atomic<bool>* cancelled = nullptr) override;
    void stop(const RunningEngine& engine, std::chrono::milliseconds grace = std::chrono::seconds(10)) override;
    // Probes every tracked engine; records and forgets those that exited. Returns the ones that exited.
    std::vector<RunningEngine> check() override;
    // Engines of an earlier anvild that still run are tracked again; records of ones that are gone
    // are closed in the ledger; engines nobody recorded are stopped. A driver that cannot answer
    // (slurmrestd or the container runtime down) keeps its records open: see adopt_pending.
    void adopt() override;
    // Asks the drivers that could not answer adopt() again, at most every kAdoptionRetry; returns
    // the engines it adopted now.
    std::vector<RunningEngine> adopt_pending() override;
    std::optional<std::string> awaiting_adoption(EngineRole role) const override;

    std::vector<RunningEngine> engines() const override;
    std::string logs(const RunningEngine& engine, std::size_t lines) const override;
    bool answers(const RunningEngine& engine) const override;

private:
    static constexpr std::chrono::seconds kAdoptionRetry{10};

    std::string driver_kind(const std::string& launch_kind) const;  // drivers_' key for a launch kind
    Driver& driver_for(const std::string& launch_kind);
    std::vector<RunningEngine> adopt_kinds(const std::vector<std::string>& kinds);
    std::optional<std::string> unadopted(const std::string& kind) const;  // why kind's adoption failed

    const SupervisorSettings settings_;
    state::EngineLedger& ledger_;
    std::map<std::string, std::unique_ptr<Driver>> drivers_;  // embedded | process | container, or slurm-embedded | slurm-process
    mutable std::mutex mutex_;
    std::mutex adoption_mutex_;
    std::vector<RunningEngine> engines_;
    // Engines being stopped (row ids): their end is no exit for check() to report.
    std::set<state::Id> stopping_;
    std::map<std::string, std::string> unadopted_;  // driver kind → why its adopt() failed
    std::chrono::steady_clock::time_point next_adoption_;
};

// The driver a launch kind runs on: embedded, native → process, docker → container; else empty.
std::string driver_kind_for(const std::string& launch_kind);

}  // namespace anvil::drivers
