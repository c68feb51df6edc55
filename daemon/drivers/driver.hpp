// The driver interface: every driver (embedded, process, container) starts an engine from a resolved
// launch exactly as written, probes it, stops it within a grace period, re-attaches to the engines it
// started before a supervisor restart, and keeps their output in size-capped logs.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "daemon/drivers/launch_resolution.hpp"

namespace anvil::drivers {

// Which recipe, at which revision (commit or document digest), an engine was started from.
struct RecipeRevision {
    std::string recipe_id;
    std::string revision;
};

// Enough to find an engine again, also from another supervisor process after a restart.
struct EngineHandle {
    std::string engine_id;  // unique per start: "<recipe id>-<random>"
    std::string driver;     // embedded | process | container
    RecipeRevision recipe;
    int pid = -1;                // process group leader (process drivers)
    std::uint64_t start_time = 0;  // /proc/<pid>/stat field 22: tells the engine from a recycled pid
    std::string container_id;    // container driver
    std::string job_id;          // Slurm driver: the batch job running the engine
    std::string host;
    int port = 0;
    std::string served_model_name;
    std::filesystem::path directory;  // the engine's state: record, logs
    std::filesystem::path log_path;
    std::string api_key;  // what clients send as 'Authorization: Bearer'; empty: the engine takes none
};


enum class RunState { running, exited, missing };

struct Probe {
    RunState state = RunState::missing;
    std::optional<int> exit_code;  // when exited and known: the code, or 128 + signal
    bool healthy = false;          // /health answered 200
};

// An engine that could not start, or exited or timed out before it was ready.
struct EngineError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// What a Slurm job of anvild's runs (the job's script execs anvil-job-exec, which execs `argv`).
struct JobCommand {
    std::vector<std::string> argv;
    std::map<std::string, std::string> environment;  // beside the placement's own
    // Where anvil-job-exec inserts a --device for each GPU Slurm gave the job (a container's).
    std::optional<std::size_t> gpu_devices_at;
    int cpus = 0;  // what the command runs with (an embedded engine's --threads), when above the placement's
    // Run by anvil-job-exec when Slurm signals the job to end (a container runtime's stop: the
    // runtime's own process does not stop its container); empty: the signal reaches the command.
    std::vector<std::string> stop_argv;
};

class Driver {
public:
    virtual ~Driver() = default;
    virtual std::string kind() const = 0;
    virtual EngineHandle start(const RecipeRevision& recipe, const ResolvedLaunch& launch) = 0;
    virtual Probe probe(const EngineHandle& engine) = 0;
    // Asks the engine to stop, forces it after `grace`, and returns once nothing of it runs.
    virtual void stop(const EngineHandle& engine, std::chrono::milliseconds grace) = 0;
    // The engines this driver's state directory records that still run; records of engines that
    // are gone are retired (their logs stay).
    virtual std::vector<EngineHandle> adopt() = 0;
    // The last `tail` lines of the engine's stdout and stderr.
    virtual std::string logs(const EngineHandle& engine, std::size_t tail) = 0;
};

}  // namespace anvil::drivers
