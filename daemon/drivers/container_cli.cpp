// The container backend that runs podman's or docker's command line (argv, never a shell). Their
// output differs: podman's inspect carries ImageDigest, docker's only the image id (the driver then
// asks for the image's RepoDigests); both accept the same run, stop, logs, rm and ps flags used here.
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <sstream>

#include "daemon/drivers/command_runner.hpp"
#include "daemon/drivers/container_driver.hpp"

extern char** environ;

namespace anvil::drivers {

using nlohmann::json;

namespace {

std::string last_line(const std::string& s) {
    std::string t = s;
    while (!t.empty() && (t.back() == '\n' || t.back() == ' ' || t.back() == '\r')) t.pop_back();
    const auto nl = t.rfind('\n');
    return nl == std::string::npos ? t : t.substr(nl + 1);
}

std::map<std::string, std::string> cli_environment(const std::map<std::string, std::string>& extra) {
    std::map<std::string, std::string> env;
    for (char** e = environ; e && *e; ++e) {
        const std::string kv = *e;
        const auto eq = kv.find('=');
        if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    for (const auto& [k, v] : extra) env[k] = v;
    return env;
}

// Detached for the local driver; in the foreground for a Slurm job, whose life is the container's
// (removed when it ends, its output the job's output).
std::vector<std::string> cli_run_arguments(const ContainerSpec& s, bool detached = true) {
    std::vector<std::string> a = {"run", detached ? "--detach" : "--rm", "--name", s.name};
    for (const auto& [k, v] : s.labels) {
        a.push_back("--label");
        a.push_back(k + "=" + v);
    }
    a.push_back("--network=" + s.network);
    if (s.publish_host) {
        a.push_back("--publish");
        a.push_back(*s.publish_host + ":" + std::to_string(s.publish_port) + ":" + std::to_string(s.container_port));
    }
    if (s.ipc) a.push_back("--ipc=" + *s.ipc);
    if (s.shm_size) a.push_back("--shm-size=" + *s.shm_size);
    a.push_back("--log-opt");
    a.push_back("max-size=" + std::to_string(s.log_cap_bytes));
    for (const auto& device : s.cdi_devices) {
        a.push_back("--device");
        a.push_back(device);
    }
    for (const auto& [k, v] : s.environment) {
        a.push_back("--env");
        a.push_back(k + "=" + v);
    }
    for (const auto& m : s.mounts) {
        a.push_back("--volume");
        a.push_back(m.source.string() + ":" + m.target + (m.read_only ? ":ro" : ""));
    }
    a.push_back(s.image);
    a.insert(a.end(), s.arguments.begin(), s.arguments.end());
    return a;
}

class CliBackend : public ContainerBackend {
public:
    explicit CliBackend(const ContainerDriverOptions& o)
        : runtime_(o.runtime), global_(o.global_arguments), env_(cli_environment(o.runtime_env)) {}

    std::string describe() const override { return runtime_; }

    std::string run(const ContainerSpec& spec) override {
        const auto r = cli(cli_run_arguments(spec));
        if (!r.ok()) throw EngineError(runtime_ + " run failed (exit " + std::to_string(r.exit_code) + "): " + last_line(r.err));
        return last_line(r.out);
    }

    std::optional<ContainerInfo> inspect(const std::string& container) override {
        const auto r = cli({"container", "inspect", container});
        if (!r.ok()) return std::nullopt;
        const json j = json::parse(r.out, nullptr, false);
        if (!j.is_array() || j.empty() || !j[0].is_object()) return std::nullopt;
        return container_info(j[0]);
    }

    std::vector<std::string> image_repo_digests(const std::string& image) override {
        std::vector<std::string> out;
        const json j = json::parse(cli({"image", "inspect", image}).out, nullptr, false);
        if (j.is_array() && !j.empty() && j[0].is_object())
            for (const auto& d : j[0].value("RepoDigests", json::array()))
                if (d.is_string()) out.push_back(d.get<std::string>());
        return out;
    }

    void stop(const std::string& container, long long seconds) override {
        const auto r = cli({"stop", "--time", std::to_string(seconds), container}, kCallDeadline + std::chrono::seconds(seconds));
        if (!r.ok()) spdlog::warn("{} stop {}: {}", runtime_, container.substr(0, 12), last_line(r.err));
    }

    std::optional<std::string> logs(const std::string& container, std::optional<std::size_t> tail) override {
        std::vector<std::string> args = {"logs"};
        if (tail) args.insert(args.end(), {"--tail", std::to_string(*tail)});
        args.push_back(container);
        const auto r = cli(args);
        if (!r.ok()) return std::nullopt;
        return r.out + r.err;
    }

    void remove(const std::string& container) override {
        const auto r = cli({"rm", "--force", container});
        if (!r.ok()) spdlog::warn("cannot remove container {}: {} rm: {}", container.substr(0, 12), runtime_, last_line(r.err));
    }

    std::vector<std::string> list_labelled(const std::string& key, const std::string& value) override {
        const auto r = cli({"ps", "--all", "--quiet", "--no-trunc", "--filter", "label=" + key + "=" + value});
        if (!r.ok()) throw EngineError(runtime_ + " ps failed: " + last_line(r.err) + "; check the container runtime works");
        std::vector<std::string> ids;
        std::istringstream in(r.out);
        for (std::string id; in >> id;) ids.push_back(id);
        return ids;
    }

private:
    // A runtime that hangs (a wedged storage lock, an unreachable service) must not hold the
    // reconciler: every call has a deadline, a stop its grace on top.
    static constexpr std::chrono::seconds kCallDeadline{120};

    CommandResult cli(const std::vector<std::string>& arguments, std::chrono::seconds deadline = kCallDeadline) const {
        std::vector<std::string> argv = {runtime_};
        argv.insert(argv.end(), global_.begin(), global_.end());
        argv.insert(argv.end(), arguments.begin(), arguments.end());
        return run_command(argv, env_, deadline);
    }

    std::string runtime_;
    std::vector<std::string> global_;
    std::map<std::string, std::string> env_;
};

}  // namespace

// The inspect shape podman and docker share with the Engine API's GET /containers/{id}/json.
ContainerInfo container_info(const json& j) {
    ContainerInfo info;
    info.id = j.value("Id", "");
    const json state = j.value("State", json::object());
    info.status = state.is_object() ? state.value("Status", "") : "";
    if (state.is_object() && state.contains("ExitCode") && state["ExitCode"].is_number_integer()) info.exit_code = state["ExitCode"].get<int>();
    const json config = j.value("Config", json::object());
    const json labels = config.is_object() ? config.value("Labels", json::object()) : json::object();
    if (labels.is_object())
        for (const auto& [k, v] : labels.items())
            if (v.is_string()) info.labels[k] = v.get<std::string>();
    info.image_id = j.value("Image", "");
    info.image_digest = j.value("ImageDigest", "");
    return info;
}

std::vector<std::string> container_run_arguments(const ContainerDriverOptions& options, const EngineHandle& engine,
                                                 const ResolvedLaunch& launch) {
    return cli_run_arguments(container_spec(options, engine, launch));
}

JobCommand container_job_command(const ContainerDriverOptions& options, const EngineHandle& engine, const ResolvedLaunch& launch) {
    if (!launch.image) throw LaunchError("recipe " + launch.recipe_id + ": a container launch needs /launch/image");
    if (!registry::is_pinned_image(*launch.image))
        throw LaunchError("recipe " + launch.recipe_id + ": image '" + *launch.image + "' is not pinned by digest; write it as name@sha256:<64 hex>");
    ContainerDriverOptions o = options;
    o.network = "host";  // the engine listens on its node's address, at the port in the job's labels
    ResolvedLaunch l = launch;
    l.gpu_uuids.clear();  // this host's GPUs, were any listed: the job's are the node's
    ContainerSpec spec = container_spec(o, engine, l);
    // The node's runtime pulls or finds the image by its digest, and refuses any other content.
    JobCommand command;
    command.argv = {options.runtime};
    command.argv.insert(command.argv.end(), options.global_arguments.begin(), options.global_arguments.end());
    if (launch.gpu_count > 0) {
        // Inside the container the job's GPUs are numbered from 0; which ones they are, only the
        // node knows (SLURM_JOB_GPUS): anvil-job-exec adds a --device for each before the image.
        std::string indices;
        for (std::int64_t i = 0; i < launch.gpu_count; ++i) indices += (i ? "," : "") + std::to_string(i);
        spec.environment["CUDA_VISIBLE_DEVICES"] = indices;
    }
    // The recipe's variables are the container's (--env), not the runtime's; but the engine's key
    // passes through the runtime's environment by name, so that it is in no argv on the node.
    command.environment = options.runtime_env;
    std::optional<std::string> key_variable;
    for (const auto& [name, value] : spec.environment)
        if (!launch.api_key.empty() && value == launch.api_key) key_variable = name;
    if (key_variable) {
        command.environment[*key_variable] = launch.api_key;
        spec.environment.erase(*key_variable);
    }
    const auto run = cli_run_arguments(spec, false);
    command.argv.insert(command.argv.end(), run.begin(), run.end());
    auto image = std::find(command.argv.begin(), command.argv.end(), spec.image);
    if (key_variable) image = command.argv.insert(image, {"--env", *key_variable}) + 2;
    if (launch.gpu_count > 0) command.gpu_devices_at = static_cast<std::size_t>(image - command.argv.begin());
    // Signalled, `podman run` ends without stopping its container (rootless podman's outer process
    // does not pass the signal on, and an engine as PID 1 may ignore it), which would outlive the
    // job holding its port and GPUs. anvil-job-exec runs this instead: SIGTERM, then SIGKILL after
    // kContainerJobStopSeconds, inside the few seconds Slurm's KillWait leaves.
    command.stop_argv = {options.runtime};
    command.stop_argv.insert(command.stop_argv.end(), options.global_arguments.begin(), options.global_arguments.end());
    command.stop_argv.insert(command.stop_argv.end(), {"stop", "--time", std::to_string(kContainerJobStopSeconds), spec.name});
    return command;
}

std::unique_ptr<ContainerBackend> make_cli_backend(const ContainerDriverOptions& options) {
    return std::make_unique<CliBackend>(options);
}

}  // namespace anvil::drivers
