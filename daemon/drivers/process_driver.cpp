#include "daemon/drivers/process_driver.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <thread>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "daemon/drivers/engine_record.hpp"
#include "daemon/drivers/log_tail.hpp"
#include "daemon/drivers/process_spawn.hpp"
#include "daemon/drivers/readiness.hpp"

namespace anvil::drivers {

namespace fs = std::filesystem;

namespace {

constexpr const char* kExitCodeFile = "exit-code";

std::optional<int> read_exit_code(const fs::path& dir) {
    std::ifstream in(dir / kExitCodeFile);
    int code = 0;
    if (in >> code) return code;
    return std::nullopt;
}

bool group_empty(pid_t pgid) { return ::kill(-pgid, 0) != 0 && errno == ESRCH; }

}  // namespace

ProcessDriver::ProcessDriver(ProcessDriverOptions options) : options_(std::move(options)) {
    fs::create_directories(options_.state_dir);
}

EngineHandle ProcessDriver::start(const RecipeRevision& recipe, const ResolvedLaunch& launch) {
    return start_command(recipe, launch, launch.arguments);
}

EngineHandle ProcessDriver::start_command(const RecipeRevision& recipe, const ResolvedLaunch& launch,
                                          const std::vector<std::string>& argv) {
    EngineHandle e = new_engine_handle(options_.kind, recipe, launch, options_.state_dir);

    SpawnPlan plan;
    plan.argv = argv;
    plan.environment = launch.environment;
    // GPUs are chosen by UUID, which CUDA accepts in CUDA_VISIBLE_DEVICES on the host; anvil places
    // the engine, so a recipe may not set the variable (registry/engine_environment).
    if (!launch.gpu_uuids.empty()) {
        plan.environment["CUDA_VISIBLE_DEVICES"] = fmt::format("{}", fmt::join(launch.gpu_uuids, ","));
    }
    plan.log_path = e.log_path;
    plan.exit_code_path = e.directory / kExitCodeFile;
    plan.log_cap_bytes = options_.log_cap_bytes;
    const Spawned s = spawn_supervised(plan, [&](const Spawned& spawned) {
        e.pid = spawned.pid;
        e.start_time = spawned.start_time;
        write_record(e);
    });
    spdlog::info("started engine {} (recipe {} at {}) as process group {}, port {}, log {}", e.engine_id,
                 recipe.recipe_id, recipe.revision, s.pid, e.port, e.log_path.string());
    return e;
}

ProcessDriver::Life ProcessDriver::life(const EngineHandle& e, std::optional<int>& exit_code) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (auto it = reaped_.find(e.pid); it != reaped_.end()) {
            exit_code = it->second;
            return Life::exited;
        }
        int status = 0;
        const pid_t r = ::waitpid(e.pid, &status, WNOHANG);
        if (r == e.pid) {
            const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            reaped_[e.pid] = code;
            exit_code = code;
            return Life::exited;
        }
        if (r == 0) return Life::running;  // our child, still running
    }
    // Not our child (adopted after a restart): /proc and the start time tell whether it still runs.
    if (same_process_alive(e.pid, e.start_time)) return Life::running;
    exit_code = read_exit_code(e.directory);
    return exit_code ? Life::exited : Life::missing;
}

Probe ProcessDriver::probe(const EngineHandle& e) {
    Probe p;
    std::optional<int> code;
    switch (life(e, code)) {
        case Life::running: p.state = RunState::running; break;
        case Life::exited: p.state = RunState::exited; break;
        case Life::missing: p.state = RunState::missing; break;
    }
    p.exit_code = code;
    if (p.state == RunState::running && e.port > 0) p.healthy = health_ok(e.host, e.port, std::chrono::milliseconds(1000));
    return p;
}

void ProcessDriver::stop(const EngineHandle& e, std::chrono::milliseconds grace) {
    using clock = std::chrono::steady_clock;
    std::optional<int> code;
    auto wait_gone = [&](clock::time_point deadline) {
        while (clock::now() < deadline) {
            if (life(e, code) != Life::running && group_empty(e.pid)) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        return life(e, code) != Life::running && group_empty(e.pid);
    };
    if (life(e, code) == Life::running) {
        // The keeper ignores SIGTERM so it can record the engine's exit; the engine and its children get it.
        ::kill(-e.pid, SIGTERM);
        if (!wait_gone(clock::now() + grace)) {
            spdlog::warn("engine {} still runs {} ms after SIGTERM; sending SIGKILL", e.engine_id, grace.count());
        }
    }
    // Whatever is left of the group (children that ignored SIGTERM, or the keeper) goes now. While
    // a member remains the group id cannot be reused, so this never signals a stranger.
    if (life(e, code) == Life::running || !group_empty(e.pid)) {
        ::kill(-e.pid, SIGKILL);
        // Zombies of an adopted group wait for init to reap them; they hold nothing, so stop waiting.
        if (!wait_gone(clock::now() + std::chrono::seconds(5)))
            spdlog::warn("engine {}: process group {} not empty 5 s after SIGKILL (zombies awaiting their parent)", e.engine_id, e.pid);
    }
    retire_record(e);
    spdlog::info("stopped engine {}{}", e.engine_id, code ? " (exit code " + std::to_string(*code) + ")" : "");
}

std::vector<EngineHandle> ProcessDriver::adopt() {
    std::vector<EngineHandle> adopted;
    for (auto& e : list_records(options_.state_dir)) {
        if (e.driver != options_.kind) continue;
        std::optional<int> code;
        if (life(e, code) == Life::running) {
            spdlog::info("adopted engine {} (recipe {}), process group {}, port {}", e.engine_id, e.recipe.recipe_id, e.pid, e.port);
            adopted.push_back(std::move(e));
        } else {
            spdlog::info("engine {} (recipe {}) is gone{}; retiring its record, keeping its log", e.engine_id, e.recipe.recipe_id,
                         code ? " (exit code " + std::to_string(*code) + ")" : "");
            // A keeper killed with SIGKILL may leave engine children behind in its group. A keeper
            // that answers signals but whose /proc entry cannot be read is alive and hidden (a
            // hidepid /proc, systemd's ProtectProc=): never kill what cannot be identified.
            if (!group_empty(e.pid) && read_proc_stat(e.pid) == std::nullopt) {
                if (::kill(e.pid, 0) == 0)
                    spdlog::warn("engine {}: process {} answers signals but /proc/{} cannot be read (hidepid or ProtectProc=?): "
                                 "left running, not adopted",
                                 e.engine_id, e.pid, e.pid);
                else
                    ::kill(-e.pid, SIGKILL);
            }
            retire_record(e);
        }
    }
    return adopted;
}

std::string ProcessDriver::logs(const EngineHandle& e, std::size_t tail) { return log_tail(e.log_path, tail); }

}  // namespace anvil::drivers
