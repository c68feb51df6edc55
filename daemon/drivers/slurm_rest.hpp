// Slurm's REST API (slurmrestd, OpenAPI v0.0.38: Slurm 22.05 as Debian 12 ships it), the way anvild
// reaches a cluster: JSON over HTTP or a unix socket, authenticated by a JWT (`scontrol token`) sent
// with the user's name on every request. Chosen over parsing squeue/sinfo text: the answers are
// typed JSON with stable field names, errors come back as data, and nothing runs through a shell.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "registry/slurm_cluster.hpp"

namespace anvil::drivers {

// slurmrestd could not be reached, refused us, or answered with errors: one line, naming the call.
struct SlurmError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct SlurmRestConfig {
    std::string address;  // "http://host:port" or "unix:/path/to/socket"
    std::string user;     // X-SLURM-USER-NAME: whom jobs run as
    std::filesystem::path token_file;  // the JWT, read at every call so a renewed token is picked up
    std::chrono::milliseconds timeout{std::chrono::seconds(10)};
};

// configuration's `placement` {"kind": "slurm", ...}: where engines go and how anvild asks for them.
struct SlurmPlacement {
    SlurmRestConfig rest;
    std::string partition;  // empty: the cluster's default partition
    std::string account;    // empty: the user's default account
    std::chrono::minutes time_limit{0};  // 0: the partition's limit
    registry::GpuMemoryByType gpu_memory_mib;  // per-GPU memory by GRES type ("*": any other)
    // Where jobs write their output, as the nodes see it: shared storage anvild reads too, for logs.
    std::filesystem::path job_directory = "/tmp";
    int cpus_per_engine = 1;          // the job's CPUs (one task)
    std::int64_t memory_mib_per_engine = 0;  // the job's memory; 0: the partition's default
    std::map<std::string, std::string> environment;  // the site's variables, in every job's environment
};

class SlurmRest {
public:
    explicit SlurmRest(SlurmRestConfig config);

    // GET /slurm/v0.0.38/ping: the controller's answer, or a SlurmError.
    nlohmann::json ping() const;
    // GET /slurm/v0.0.38/nodes, read into the cluster's nodes.
    registry::SlurmCluster nodes() const;
    // The plain calls, for what is not typed yet: the decoded answer of a 2xx reply whose `errors`
    // is empty, or a SlurmError naming the method, the path and what went wrong.
    nlohmann::json get(const std::string& path) const;
    nlohmann::json post(const std::string& path, const nlohmann::json& body) const;
    nlohmann::json remove(const std::string& path) const;

    const SlurmRestConfig& config() const { return config_; }
    // "slurmrestd http://127.0.0.1:6820 as anvil"
    std::string describe() const;

private:
    nlohmann::json call(const std::string& method, const std::string& path, const nlohmann::json* body) const;
    SlurmRestConfig config_;
};

}  // namespace anvil::drivers
