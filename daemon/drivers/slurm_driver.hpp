// The Slurm driver: an engine (embedded, native process, or container run by the node's runtime)
// as a batch job of the configured cluster, asking for the recipe's GPUs. The job's script only execs anvil-job-exec, which execs
// the argv a local driver would run, passed as JSON in the job's environment: no recipe string is
// ever parsed by a shell. The job is named and
// commented with the engine's labels (engine id, recipe, revision, port), and the driver keeps a
// record beside the local ones, so a restarted anvild adopts the job instead of submitting another.
// Its node is read from the job once Slurm starts it; readiness is probed there over HTTP; its log
// is the job's output file.
#pragma once

#include <functional>
#include <mutex>
#include <set>

#include "daemon/drivers/driver.hpp"
#include "daemon/drivers/slurm_rest.hpp"

namespace anvil::drivers {

struct SlurmDriverOptions {
    SlurmPlacement placement;
    std::filesystem::path state_dir;  // one sub-directory per engine: its record
    std::string kind;                 // "slurm-embedded", "slurm-process" or "slurm-container": what records and the ledger carry
    // The command the job runs for an engine (embedded_argv, the launch's own arguments, or the
    // container runtime's run; its host is not known yet).
    std::function<JobCommand(const EngineHandle&, const ResolvedLaunch&)> command;
    // anvil-job-exec as the nodes see it: the job's script execs it, and it execs the command.
    std::filesystem::path job_exec;
};

// What a job of ours is, from slurmrestd's job object.
struct SlurmJob {
    std::int64_t id = 0;
    std::string name;
    std::string state;   // PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, PREEMPTED, NODE_FAIL, ...
    std::string reason;  // why it is pending or ended
    std::string node;    // the batch host, once running
    std::optional<int> exit_code;
    std::string comment;
    std::string standard_output;
};
// An embedded engine's job: it runs with the CPUs the job asks for. A recipe's --threads asks for
// that many; without one the engine gets --threads of the placement's CPUs, since a node's cores
// are not all the job's (with task/none Slurm does not confine it).
JobCommand embedded_job_command(std::vector<std::string> argv, const std::map<std::string, std::string>& environment, int cpus);
// The memory a job asks for: memory_mib_per_engine, or more when the engine's estimate on paper
// needs it; nullopt (the partition's default) when neither is known.
std::optional<std::int64_t> job_memory_mib(const SlurmPlacement& placement, const ResolvedLaunch& launch);
// slurmrestd's answer for one job ({"jobs": [{...}]}), or nullopt when it lists none.
std::optional<SlurmJob> read_slurm_job(const nlohmann::json& answer);
// Whether a job in `state` still holds or waits for its node.
bool slurm_job_alive(const std::string& state);

class SlurmDriver : public Driver {
public:
    explicit SlurmDriver(SlurmDriverOptions options);
    std::string kind() const override { return options_.kind; }
    // Submits the job and waits until Slurm has started it on a node (within the launch's ready
    // timeout, pending time included), so the handle carries the node's address.
    EngineHandle start(const RecipeRevision& recipe, const ResolvedLaunch& launch) override;
    Probe probe(const EngineHandle& engine) override;
    // scancel's way: SIGTERM to the job, then Slurm's own KillWait and SIGKILL; waits up to `grace`
    // plus that for the job to end.
    void stop(const EngineHandle& engine, std::chrono::milliseconds grace) override;
    std::vector<EngineHandle> adopt() override;
    std::string logs(const EngineHandle& engine, std::size_t tail) override;

    // The job as slurmrestd reports it now; nullopt once Slurm has forgotten it.
    std::optional<SlurmJob> job(const std::string& job_id) const;

private:
    // The job's GRES for `gpus` GPUs: of the type the gates judge by (gpu_gres_request).
    std::string gres_request(std::int64_t gpus) const;
    // A node's address as slurmrestd lists it (its NodeAddr), or the name when it lists none.
    std::string node_address(const std::string& node) const;

    SlurmDriverOptions options_;
    SlurmRest rest_;
    // Jobs this driver cancelled: their CANCELLED end is the stop asked for, not news to warn of.
    mutable std::mutex cancelled_mutex_;
    std::set<std::string> cancelled_;
};

}  // namespace anvil::drivers
