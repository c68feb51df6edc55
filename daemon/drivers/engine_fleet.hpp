// What the controller needs from whoever runs engines: start, stop, watch and list them, and say
// on paper whether a recipe could start. EngineSupervisor is the real one; the controller's tests
// give a fleet that starts nothing, so each reconcile decision can be checked in milliseconds.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/drivers/driver.hpp"
#include "registry/recipe.hpp"
#include "state/records.hpp"

namespace anvil::drivers {

// Why an engine runs: it serves the default behind the stable endpoint, or it is being qualified.
// Stored in the ledger's engines table as the string to_string gives.
enum class EngineRole { serving, qualification };
std::string_view to_string(EngineRole role);
// Unknown strings (a ledger written by a later anvild) read as qualification: never served.
EngineRole engine_role_from(std::string_view text);

struct RunningEngine {
    state::Id row_id = 0;  // engines table
    state::Id revision_id = 0;
    EngineRole role = EngineRole::qualification;
    EngineHandle handle;
};

class EngineFleet {
public:
    virtual ~EngineFleet() = default;

    // Why anvild cannot run this recipe at all, judged on paper: one line, or nothing.
    virtual std::optional<std::string> unsupported(const registry::Recipe& recipe) const = 0;
    // Whether the recipe could start now (its model present with the pinned digest, ...).
    virtual std::optional<std::string> startable(const registry::Recipe& recipe) const = 0;
    // The directory a recipe's model block names, placed as a launch would place it; throws
    // LaunchError naming `where` when it cannot be placed.
    virtual std::filesystem::path model_directory(const registry::ModelRef& model, const std::string& where) const = 0;

    // Starts, waits until ready, records; throws with the reason.
    virtual RunningEngine start(state::Id revision_id, const registry::Recipe& recipe, EngineRole role,
                                const std::atomic<bool>* cancelled = nullptr) = 0;
    virtual void stop(const RunningEngine& engine, std::chrono::milliseconds grace = std::chrono::seconds(10)) = 0;
    // Probes every engine; forgets and returns those that exited.
    virtual std::vector<RunningEngine> check() = 0;
    // Tracks again the engines an earlier run left behind.
    virtual void adopt() = 0;
    // Where adopt() could not reach where engines run (a Slurm cluster's slurmrestd down), the
    // engines it adopted on a later try; a fleet that always reaches its engines has none.
    virtual std::vector<RunningEngine> adopt_pending() { return {}; }
    // Why an engine of this role that an earlier run left may still run where it cannot be
    // reached yet: nothing should replace it until adoption answers.
    virtual std::optional<std::string> awaiting_adoption(EngineRole /*role*/) const { return std::nullopt; }
    // Whether a ready engine still answers its OpenAI API (/v1/models lists its model).
    virtual bool answers(const RunningEngine& engine) const = 0;

    virtual std::vector<RunningEngine> engines() const = 0;
    // The last `lines` lines of the engine's stdout and stderr, as its driver keeps them.
    virtual std::string logs(const RunningEngine& engine, std::size_t lines) const = 0;
    std::optional<RunningEngine> serving_for(state::Id revision_id) const {
        for (auto& e : engines())
            if (e.revision_id == revision_id && e.role == EngineRole::serving) return e;
        return std::nullopt;
    }
};

}  // namespace anvil::drivers
