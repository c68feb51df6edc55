#include "daemon/drivers/slurm_driver.hpp"

#include <thread>

#include <spdlog/spdlog.h>

#include "daemon/drivers/engine_record.hpp"
#include "daemon/drivers/log_tail.hpp"
#include "daemon/drivers/readiness.hpp"

namespace anvil::drivers {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kApi = "/slurm/v0.0.38";
constexpr const char* kJobNamePrefix = "anvil:";

// The whole batch script: it execs anvil-job-exec, whose path comes from anvild's installation,
// never from a recipe; the command travels in the environment (ANVIL_JOB_ARGV).
std::string batch_script(const std::filesystem::path& job_exec) {
    const std::string path = job_exec.string();
    if (path.find_first_of("'\n") != std::string::npos)
        throw EngineError("anvil-job-exec's path " + path + " holds a quote or a newline; install anvil where it does not");
    return "#!/bin/sh\n# an anvil engine: anvil-job-exec runs the command in ANVIL_JOB_ARGV as given\nexec '" + path + "'\n";
}

std::string text(const json& j, const char* key) {
    return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

std::string output_path(const SlurmPlacement& placement, const std::string& engine_id) {
    return (placement.job_directory / ("anvil-" + engine_id + ".log")).string();
}

}  // namespace

JobCommand embedded_job_command(std::vector<std::string> argv, const std::map<std::string, std::string>& environment, int cpus) {
    JobCommand c;
    c.argv = std::move(argv);
    c.environment = environment;
    std::optional<int> threads;
    for (std::size_t i = 0; i + 1 < c.argv.size(); ++i)
        if (c.argv[i] == "--threads") threads = std::atoi(c.argv[i + 1].c_str());
    for (const auto& a : c.argv)
        if (a.starts_with("--threads=")) threads = std::atoi(a.c_str() + 10);
    if (threads && *threads > 0) {
        c.cpus = *threads;
    } else {
        c.argv.insert(c.argv.end(), {"--threads", std::to_string(cpus)});
        c.cpus = cpus;
    }
    return c;
}

std::optional<std::int64_t> job_memory_mib(const SlurmPlacement& placement, const ResolvedLaunch& launch) {
    constexpr std::int64_t kMiB = 1 << 20;
    // The estimate counts weights and KV cache only: a quarter more, and 512 MiB for the process
    // itself (activations, tokenizer, HTTP server, the runtime's libraries).
    const std::int64_t on_paper = launch.memory_bytes > 0 ? (launch.memory_bytes + launch.memory_bytes / 4 + kMiB - 1) / kMiB + 512 : 0;
    const std::int64_t mib = std::max(placement.memory_mib_per_engine, on_paper);
    return mib > 0 ? std::optional(mib) : std::nullopt;
}

std::optional<SlurmJob> read_slurm_job(const json& answer) {
    if (!answer.is_object() || !answer.contains("jobs") || !answer["jobs"].is_array() || answer["jobs"].empty()) return std::nullopt;
    const json& j = answer["jobs"][0];
    if (!j.is_object()) return std::nullopt;
    SlurmJob job;
    job.id = j.value("job_id", std::int64_t{0});
    job.name = text(j, "name");
    job.state = text(j, "job_state");
    job.reason = text(j, "state_reason");
    job.node = text(j, "batch_host");
    job.comment = text(j, "comment");
    job.standard_output = text(j, "standard_output");
    // v0.0.38 gives the batch script's wait status as a number.
    if (j.contains("exit_code") && j["exit_code"].is_number_integer()) {
        const int status = j["exit_code"].get<int>();
        job.exit_code = (status & 0x7f) ? 128 + (status & 0x7f) : (status >> 8) & 0xff;
    }
    return job;
}

bool slurm_job_alive(const std::string& state) {
    return state == "PENDING" || state == "RUNNING" || state == "CONFIGURING" || state == "SUSPENDED" || state == "COMPLETING" ||
           state == "REQUEUED" || state == "RESIZING" || state == "SIGNALING" || state == "STAGE_OUT";
}

SlurmDriver::SlurmDriver(SlurmDriverOptions options) : options_(std::move(options)), rest_(options_.placement.rest) {
    fs::create_directories(options_.state_dir);
}

std::optional<SlurmJob> SlurmDriver::job(const std::string& job_id) const {
    try {
        return read_slurm_job(rest_.get(std::string(kApi) + "/job/" + job_id));
    } catch (const SlurmError& e) {
        // slurmrestd answers a job Slurm has forgotten (past MinJobAge) with an error, not an empty list.
        const std::string what = e.what();
        if (what.find("Invalid job id") != std::string::npos || what.find("Unable to query JobId") != std::string::npos) return std::nullopt;
        throw;
    }
}

std::string SlurmDriver::gres_request(std::int64_t gpus) const {
    // The cluster as it is now: the node the gates judge by may have changed since they did.
    registry::SlurmCluster cluster;
    try {
        cluster = rest_.nodes();
    } catch (const SlurmError& error) {
        spdlog::warn("asking for {} GPUs of any type: the nodes could not be read: {}", gpus, error.what());
        return registry::gpu_gres_request(nullptr, gpus);
    }
    return registry::gpu_gres_request(registry::best_node(cluster, options_.placement.partition, options_.placement.gpu_memory_mib), gpus);
}

std::string SlurmDriver::node_address(const std::string& node) const {
    for (const auto& n : rest_.nodes().nodes)
        if (n.name == node) return n.address.empty() ? n.name : n.address;
    return node;
}

EngineHandle SlurmDriver::start(const RecipeRevision& recipe, const ResolvedLaunch& launch) {
    EngineHandle e = new_engine_handle(options_.kind, recipe, launch, options_.state_dir);
    e.host.clear();  // the node's address, once Slurm has started the job
    e.log_path = output_path(options_.placement, e.engine_id);

    const std::string script = batch_script(options_.job_exec);
    const JobCommand command = options_.command(e, launch);
    // The site's variables (placement.environment), then the engine's; anvil-job-exec's own last.
    json environment = json::object();
    for (const auto& [name, value] : options_.placement.environment) environment[name] = value;
    for (const auto& [name, value] : command.environment) environment[name] = value;
    environment["ANVIL_JOB_ARGV"] = json(command.argv).dump();
    if (command.gpu_devices_at) environment["ANVIL_JOB_GPU_DEVICES_AT"] = std::to_string(*command.gpu_devices_at);
    if (!command.stop_argv.empty()) environment["ANVIL_JOB_STOP_ARGV"] = json(command.stop_argv).dump();
    // slurmrestd requires an environment; a job's PATH is the node's usual one unless set above.
    if (!environment.contains("PATH")) environment["PATH"] = "/usr/local/bin:/usr/bin:/bin";
    const json labels = {{"engine_id", e.engine_id}, {"recipe_id", recipe.recipe_id}, {"revision", recipe.revision}, {"port", e.port}};
    json request = {{"name", kJobNamePrefix + e.engine_id},
                {"environment", environment},
                {"current_working_directory", options_.placement.job_directory.string()},
                {"standard_output", e.log_path.string()},
                {"standard_error", e.log_path.string()},
                {"comment", json{{"anvil", labels}}.dump()},
                {"tasks", 1},
                {"cpus_per_task", std::max(options_.placement.cpus_per_engine, command.cpus)},
                // Never requeued: a job Slurm ends is an engine exit the reconciler replaces, and a
                // requeued one would come back later under the same id on another node. slurmrestd
                // 22.05 takes sbatch's --no-requeue; it reads "requeue": false as --requeue.
                {"no_requeue", true}};
    if (!options_.placement.partition.empty()) request["partition"] = options_.placement.partition;
    if (!options_.placement.account.empty()) request["account"] = options_.placement.account;
    if (options_.placement.time_limit.count() > 0) request["time_limit"] = options_.placement.time_limit.count();
    if (const auto mib = job_memory_mib(options_.placement, launch)) request["memory_per_node"] = *mib;
    if (launch.gpu_count > 0) request["gres"] = gres_request(launch.gpu_count);

    // The record first, without a job id: a crash between the submission and the record leaves a
    // labelled job that adoption finds by its name rather than one nobody knows about.
    write_record(e);
    json answer;
    try {
        answer = rest_.post(std::string(kApi) + "/job/submit", json{{"job", request}, {"script", script}});
    } catch (const SlurmError& error) {
        retire_record(e);
        throw EngineError("engine " + e.engine_id + " (recipe " + recipe.recipe_id + "): the job was refused: " + error.what());
    }
    if (!answer.contains("job_id") || !answer["job_id"].is_number_integer()) {
        retire_record(e);
        throw EngineError("engine " + e.engine_id + ": slurmrestd accepted the job but gave no job id: " + answer.dump().substr(0, 200));
    }
    e.job_id = std::to_string(answer["job_id"].get<std::int64_t>());
    write_record(e);
    spdlog::info("submitted engine {} (recipe {} at {}) as Slurm job {}, port {}{}, output {}", e.engine_id, recipe.recipe_id,
                 recipe.revision, e.job_id, e.port, request.contains("gres") ? ", gres " + request["gres"].get<std::string>() : "",
                 e.log_path.string());

    // Until Slurm starts it, the job has no node to probe: wait, within the launch's ready timeout.
    const auto deadline = std::chrono::steady_clock::now() + launch.ready_timeout;
    for (;;) {
        std::optional<SlurmJob> j;
        try {
            j = job(e.job_id);
        } catch (const SlurmError& error) {
            // slurmctld or slurmrestd briefly unreachable: the job is submitted, so keep waiting.
            if (std::chrono::steady_clock::now() >= deadline) {
                stop(e, std::chrono::seconds(5));
                throw EngineError("engine " + e.engine_id + ": Slurm job " + e.job_id + ": " + error.what());
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(500));
            continue;
        }
        if (j && j->state == "RUNNING" && !j->node.empty()) {
            e.host = node_address(j->node);
            write_record(e);
            spdlog::info("engine {}: Slurm job {} runs on {} ({})", e.engine_id, e.job_id, j->node, e.host);
            return e;
        }
        if (!j || !slurm_job_alive(j->state)) {
            retire_record(e);
            throw EngineError("engine " + e.engine_id + " (recipe " + recipe.recipe_id + "): Slurm job " + e.job_id + " ended before it ran (" +
                              (j ? j->state + (j->reason.empty() || j->reason == "None" ? "" : ", " + j->reason) : "forgotten") +
                              "); last output lines:\n" + log_tail(e.log_path, 20));
        }
        if (std::chrono::steady_clock::now() >= deadline) {
            stop(e, std::chrono::seconds(5));
            throw EngineError("engine " + e.engine_id + " (recipe " + recipe.recipe_id + "): Slurm job " + e.job_id + " still " + j->state +
                              " (" + j->reason + ") after the ready timeout; cancelled");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
}

Probe SlurmDriver::probe(const EngineHandle& e) {
    Probe p;
    if (e.job_id.empty()) return p;
    std::optional<SlurmJob> j;
    try {
        j = job(e.job_id);
    } catch (const SlurmError& error) {
        // The controller unreachable is not the engine gone: report it running, unhealthy, and let
        // readiness and health checks decide.
        spdlog::warn("engine {}: {}", e.engine_id, error.what());
        p.state = RunState::running;
        return p;
    }
    if (!j) return p;  // missing: Slurm has forgotten the job
    if (slurm_job_alive(j->state)) {
        p.state = RunState::running;
        if (j->state == "RUNNING" && !e.host.empty() && e.port > 0) p.healthy = health_ok(e.host, e.port, std::chrono::milliseconds(1000));
        return p;
    }
    p.state = RunState::exited;
    p.exit_code = j->exit_code;
    // Ended by Slurm rather than by the engine (cancelled, time limit, preemption, node failure):
    // Slurm reports 0 for the script it killed, which is no exit code of the engine's.
    if (j->state != "COMPLETED" && j->state != "FAILED") {
        p.exit_code.reset();
        bool asked;
        {
            std::lock_guard lock(cancelled_mutex_);
            asked = cancelled_.count(e.job_id) > 0;
        }
        if (!asked || j->state != "CANCELLED")
            spdlog::warn("engine {}: Slurm job {} ended {}{}", e.engine_id, e.job_id, j->state, j->reason.empty() ? "" : " (" + j->reason + ")");
    }
    return p;
}

void SlurmDriver::stop(const EngineHandle& e, std::chrono::milliseconds grace) {
    if (!e.job_id.empty()) {
        try {
            // DELETE is scancel: SIGTERM now, SIGKILL after the cluster's KillWait.
            {
                std::lock_guard lock(cancelled_mutex_);
                cancelled_.insert(e.job_id);
            }
            rest_.remove(std::string(kApi) + "/job/" + e.job_id);
        } catch (const SlurmError& error) {
            spdlog::warn("engine {}: cancelling Slurm job {}: {}", e.engine_id, e.job_id, error.what());
        }
        const auto deadline = std::chrono::steady_clock::now() + grace + std::chrono::seconds(30);
        while (std::chrono::steady_clock::now() < deadline) {
            std::optional<SlurmJob> j;
            try {
                j = job(e.job_id);
            } catch (const SlurmError&) {
                break;
            }
            if (!j || (!slurm_job_alive(j->state) && j->state != "COMPLETING")) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    }
    retire_record(e);
    spdlog::info("stopped engine {} (Slurm job {})", e.engine_id, e.job_id);
}

std::vector<EngineHandle> SlurmDriver::adopt() {
    std::vector<EngineHandle> adopted;
    std::vector<EngineHandle> records;
    for (auto& e : list_records(options_.state_dir))
        if (e.driver == options_.kind) records.push_back(std::move(e));
    if (records.empty()) return adopted;
    // Every job of ours Slurm still knows, by engine id: a record without a job id finds its job here.
    std::map<std::string, SlurmJob> ours;
    const json jobs = rest_.get(std::string(kApi) + "/jobs");
    for (const auto& j : jobs.value("jobs", json::array())) {
        const auto one = read_slurm_job(json{{"jobs", {j}}});
        if (one && one->name.rfind(kJobNamePrefix, 0) == 0) ours[one->name.substr(std::string(kJobNamePrefix).size())] = *one;
    }
    for (auto& e : records) {
        const auto it = ours.find(e.engine_id);
        const bool alive = it != ours.end() && slurm_job_alive(it->second.state) &&
                           (e.job_id.empty() || e.job_id == std::to_string(it->second.id));
        if (!alive) {
            spdlog::info("engine {} (recipe {}): Slurm job {} is gone; retiring its record", e.engine_id, e.recipe.recipe_id,
                         e.job_id.empty() ? "(never numbered)" : e.job_id);
            retire_record(e);
            continue;
        }
        e.job_id = std::to_string(it->second.id);
        if (!it->second.node.empty()) e.host = node_address(it->second.node);
        write_record(e);
        spdlog::info("adopted engine {} (recipe {}), Slurm job {} on {}, port {}", e.engine_id, e.recipe.recipe_id, e.job_id, e.host, e.port);
        adopted.push_back(std::move(e));
    }
    return adopted;
}

std::string SlurmDriver::logs(const EngineHandle& e, std::size_t tail) {
    if (fs::exists(e.log_path)) return log_tail(e.log_path, tail);
    return "(the job's output " + e.log_path.string() + " is on its node; placement.job_directory on storage anvild reads shows it here)";
}

}  // namespace anvil::drivers
