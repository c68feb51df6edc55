// The container driver: runs a recipe's digest-pinned image with podman or docker through their
// command line, or through the Docker-compatible Engine API on a unix socket. It refuses an image not pinned by digest, checks after start that the container
// runs exactly the pinned image (drift is an error), maps GPUs, ipc, shm size, environment and mounts
// from the recipe, and labels every container it owns so a restarted supervisor can adopt them.
#pragma once

#include <memory>

#include "daemon/drivers/container_backend.hpp"
#include "daemon/drivers/driver.hpp"

namespace anvil::drivers {

struct ContainerDriverOptions {
    std::string runtime = "podman";                  // the CLI: podman or docker (a path or a name on PATH)
    std::vector<std::string> global_arguments;       // e.g. {"--runtime", "runc", "--cgroup-manager", "cgroupfs"}
    std::map<std::string, std::string> runtime_env;  // added to this process's environment for the CLI (CONTAINERS_CONF)
    std::filesystem::path api_socket;                // when set: the Engine API on this unix socket, not the CLI
    std::string network = "host";                    // port publishing may be unavailable; host networking is not
    std::string owner = "anvil";                     // value of the anvil.owner label: whose containers adopt() sees
    std::filesystem::path state_dir;                 // per engine: the logs saved when the container is removed
    std::size_t log_cap_bytes = 16u << 20;
    bool keep_stopped = false;  // keep stopped containers for diagnosis instead of removing them
};

// The `run` argv for a launch (without the runtime and its global arguments), for tests and review.
std::vector<std::string> container_run_arguments(const ContainerDriverOptions& options, const EngineHandle& engine,
                                                 const ResolvedLaunch& launch);

// The command a Slurm job runs for a container launch: the runtime's CLI in the foreground, on the
// node's network, the recipe's image by its digest (see SlurmDriver).
JobCommand container_job_command(const ContainerDriverOptions& options, const EngineHandle& engine, const ResolvedLaunch& launch);
// How long a container job's engine has to stop when Slurm ends the job, before SIGKILL: below
// Slurm's default KillWait (30 s) and most sites' settings.
inline constexpr int kContainerJobStopSeconds = 3;

class ContainerDriver : public Driver {
public:
    explicit ContainerDriver(ContainerDriverOptions options);
    std::string kind() const override { return "container"; }
    EngineHandle start(const RecipeRevision& recipe, const ResolvedLaunch& launch) override;
    Probe probe(const EngineHandle& engine) override;
    void stop(const EngineHandle& engine, std::chrono::milliseconds grace) override;
    std::vector<EngineHandle> adopt() override;
    std::string logs(const EngineHandle& engine, std::size_t tail) override;

    // The runtime's view of a container, or nothing when it does not exist.
    std::optional<ContainerInfo> inspect(const std::string& container) const;

private:
    // The digest the runtime resolved the container's image to, or "" when it cannot tell.
    std::string running_digest(const ContainerInfo& info, const std::string& pinned) const;
    void save_logs(const EngineHandle& engine) const;
    void remove(const EngineHandle& engine) const;

    ContainerDriverOptions options_;
    std::unique_ptr<ContainerBackend> backend_;
};

}  // namespace anvil::drivers
