#include "daemon/drivers/engine_supervisor.hpp"

#include <unistd.h>

#include <algorithm>

#include <spdlog/spdlog.h>

#include "daemon/drivers/api_key.hpp"
#include "daemon/drivers/container_driver.hpp"
#include "daemon/drivers/embedded_driver.hpp"
#include "daemon/drivers/launch_resolution.hpp"
#include "daemon/drivers/process_driver.hpp"
#include "daemon/drivers/readiness.hpp"
#include "daemon/drivers/slurm_driver.hpp"
#include "registry/embedded_memory.hpp"
#include "registry/model_digest.hpp"

namespace anvil::drivers {

namespace {

std::filesystem::path engine_binary(const SupervisorSettings& s) {
    if (!s.engine_binary.empty()) return s.engine_binary;
    // Installed beside anvild, or in the build tree's engine/ folder next to daemon/.
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    for (const auto& candidate : {self.parent_path() / "anvil-engine", self.parent_path().parent_path() / "engine" / "anvil-engine"})
        if (!ec && access(candidate.c_str(), X_OK) == 0) return candidate;
    return "anvil-engine";
}

ContainerDriverOptions container_options(const SupervisorSettings& s) {
    ContainerDriverOptions c;
    c.runtime = s.container_runtime;
    c.global_arguments = s.container_runtime_arguments;
    c.state_dir = s.data_dir / "containers";
    return c;
}

}  // namespace

std::string_view to_string(EngineRole role) { return role == EngineRole::serving ? "serving" : "qualification"; }

EngineRole engine_role_from(std::string_view text) { return text == "serving" ? EngineRole::serving : EngineRole::qualification; }

std::string driver_kind_for(const std::string& launch_kind) {
    if (launch_kind == "embedded") return "embedded";
    if (launch_kind == "native") return "process";
    if (launch_kind == "docker") return "container";
    return "";
}

EngineSupervisor::EngineSupervisor(SupervisorSettings settings, state::EngineLedger& engines) : settings_(std::move(settings)), ledger_(engines) {
    const auto engines_dir = settings_.data_dir / "engines";
    if (settings_.slurm) {
        const auto binary = engine_binary(settings_);
        // Installed beside anvil-engine, on the nodes as here (a cluster shares its software).
        const auto job_exec = binary.has_parent_path() ? binary.parent_path() / "anvil-job-exec" : std::filesystem::path("anvil-job-exec");
        drivers_["slurm-embedded"] = std::make_unique<SlurmDriver>(SlurmDriverOptions{
            *settings_.slurm, engines_dir, "slurm-embedded",
            [binary, cpus = settings_.slurm->cpus_per_engine](const EngineHandle&, const ResolvedLaunch& l) {
                return embedded_job_command(embedded_argv(binary, l), l.environment, cpus);
            },
            job_exec});
        drivers_["slurm-process"] = std::make_unique<SlurmDriver>(SlurmDriverOptions{
            *settings_.slurm, engines_dir, "slurm-process",
            [](const EngineHandle&, const ResolvedLaunch& l) {
                JobCommand c;
                c.argv = l.arguments;
                c.environment = l.environment;
                return c;
            }, job_exec});
        // The node's container runtime, by its command line (an Engine API socket is this host's).
        drivers_["slurm-container"] = std::make_unique<SlurmDriver>(SlurmDriverOptions{
            *settings_.slurm, engines_dir, "slurm-container",
            [c = container_options(settings_)](const EngineHandle& e, const ResolvedLaunch& l) { return container_job_command(c, e, l); },
            job_exec});
        return;
    }
    drivers_["embedded"] = std::make_unique<EmbeddedDriver>(engine_binary(settings_), ProcessDriverOptions{engines_dir, 16u << 20, "embedded"});
    drivers_["process"] = std::make_unique<ProcessDriver>(ProcessDriverOptions{engines_dir, 16u << 20, "process"});
    ContainerDriverOptions c = container_options(settings_);
    c.api_socket = settings_.container_api_socket;
    drivers_["container"] = std::make_unique<ContainerDriver>(c);
}

EngineSupervisor::~EngineSupervisor() = default;

std::string EngineSupervisor::driver_kind(const std::string& launch_kind) const {
    return (settings_.slurm ? "slurm-" : "") + driver_kind_for(launch_kind);
}

Driver& EngineSupervisor::driver_for(const std::string& launch_kind) {
    auto it = drivers_.find(driver_kind(launch_kind));
    if (it == drivers_.end()) throw LaunchError("launch kind '" + launch_kind + "' cannot be run by anvild");
    return *it->second;
}

std::optional<std::string> EngineSupervisor::unsupported(const registry::Recipe& recipe) const {
    if (driver_kind_for(recipe.launch.kind).empty())
        return "launch kind '" + recipe.launch.kind + "' is not something anvild runs (embedded, native and docker are)";
    return paper_refusal(recipe, settings_.launch);
}

std::optional<std::string> EngineSupervisor::startable(const registry::Recipe& recipe) const {
    if (auto why = unsupported(recipe)) return why;
    try {
        const auto launch = resolve_launch(recipe, settings_.launch, {});
        if (recipe.launch.kind == "embedded") {
            const auto binary = engine_binary(settings_);
            if (binary.is_absolute() && access(binary.c_str(), X_OK) != 0) return "engine binary " + binary.string() + " is not executable";
            // A model is a Hugging Face directory or one GGUF file.
            const auto is_model = [](const std::optional<std::filesystem::path>& p) {
                return p && (std::filesystem::is_directory(*p) || std::filesystem::is_regular_file(*p));
            };
            if (!is_model(launch.model_path))
                return "model " + (launch.model_path ? launch.model_path->string() : std::string("(none)")) +
                       " does not exist (expected a model directory or a GGUF file)";
            if (recipe.launch.model && recipe.launch.model->digest) {
                const std::string digest = registry::model_digest(*launch.model_path);
                if (digest != *recipe.launch.model->digest)
                    return "model " + launch.model_path->string() + " has digest " + digest + ", but the recipe pins " +
                           *recipe.launch.model->digest;
            }
            // A draft model is loaded as the target is: the same existence and digest checks.
            if (const auto& draft = recipe.launch.draft; draft && draft->model) {
                if (!is_model(launch.draft_model_path))
                    return "draft model " + (launch.draft_model_path ? launch.draft_model_path->string() : std::string("(none)")) +
                           " does not exist (expected a model directory or a GGUF file)";
                if (draft->model->digest) {
                    const std::string digest = registry::model_digest(*launch.draft_model_path);
                    if (digest != *draft->model->digest)
                        return "draft model " + launch.draft_model_path->string() + " has digest " + digest +
                               ", but the recipe pins " + *draft->model->digest;
                }
            }
        }
    } catch (const std::exception& e) {
        return e.what();
    }
    return std::nullopt;
}

std::filesystem::path EngineSupervisor::model_directory(const registry::ModelRef& model, const std::string& where) const {
    const auto& launch = settings_.launch;
    return resolve_inside_roots(expand_placeholders(model.path, launch.placeholders, where), launch.allowed_roots, where);
}

RunningEngine EngineSupervisor::start(state::Id revision_id, const registry::Recipe& recipe, EngineRole role,
                                      const std::atomic<bool>* cancelled) {
    if (auto why = startable(recipe)) throw EngineError("recipe " + recipe.id + " cannot start: " + *why);
    // Nothing starts where engines of an earlier run may still run unadopted: a job submitted now
    // could not be told from theirs, and adoption then would take or retire it.
    const std::string kind = driver_kind(recipe.launch.kind);
    if (unadopted(kind)) adopt_kinds({kind});
    if (const auto why = unadopted(kind))
        throw EngineError("recipe " + recipe.id + " cannot start yet: the " + kind + " engines of an earlier run are not adopted (" + *why + ")");
    std::set<int> taken;
    for (const auto& e : engines()) taken.insert(e.handle.port);
    auto launch = resolve_launch(recipe, settings_.launch, taken);
    // A job asks the cluster for the memory the engine needs (a local engine just takes it).
    if (settings_.slurm && recipe.launch.kind == "embedded") {
        const auto estimate = registry::estimate_embedded_memory(recipe, [this](const registry::ModelRef& m) -> registry::ModelShapeReading {
            try {
                return registry::read_model_shape(model_directory(m, "model directory"));
            } catch (const std::exception& e) {
                return {std::nullopt, e.what()};
            }
        });
        launch.memory_bytes = estimate.total.max.value_or(0);
    }
    // Each engine gets a key of its own (those that read one from their environment): another local
    // process cannot use it behind the endpoint's back.
    assign_api_key(launch, recipe.engine_name);
    Driver& d = driver_for(recipe.launch.kind);
    RunningEngine engine;
    engine.revision_id = revision_id;
    engine.role = role;
    engine.handle = d.start({recipe.id, std::to_string(revision_id)}, launch);
    state::EngineRow row;
    row.revision_id = revision_id;
    row.driver = d.kind();
    if (engine.handle.pid > 0) row.pid = engine.handle.pid;
    if (!engine.handle.container_id.empty()) row.container_id = engine.handle.container_id;
    if (!engine.handle.job_id.empty()) row.job_id = engine.handle.job_id;
    row.port = engine.handle.port;
    row.engine_key = engine.handle.engine_id;
    row.role = std::string(to_string(role));
    engine.row_id = ledger_.record_engine_start(row);
    {
        std::lock_guard lock(mutex_);
        engines_.push_back(engine);
    }
    try {
        wait_ready(d, engine.handle, launch.ready_timeout, 20, cancelled);
    } catch (...) {
        stop(engine, std::chrono::seconds(2));
        throw;
    }
    ledger_.record_engine_health(engine.row_id, "healthy");
    spdlog::info("engine {} ({} of {} revision {}) ready on {}:{}", engine.handle.engine_id, to_string(role), recipe.id, revision_id,
                 engine.handle.host, engine.handle.port);
    return engine;
}

void EngineSupervisor::stop(const RunningEngine& engine, std::chrono::milliseconds grace) {
    {
        std::lock_guard lock(mutex_);
        stopping_.insert(engine.row_id);
    }
    auto it = drivers_.find(engine.handle.driver);
    std::optional<std::int64_t> code;
    if (it != drivers_.end()) {
        try {
            it->second->stop(engine.handle, grace);
            code = it->second->probe(engine.handle).exit_code;
        } catch (const std::exception& e) {
            spdlog::warn("stopping engine {}: {}", engine.handle.engine_id, e.what());
        }
    }
    try {
        ledger_.record_engine_stop(engine.row_id, code);
    } catch (const std::exception& e) {
        spdlog::warn("recording the stop of engine {}: {}", engine.handle.engine_id, e.what());
    }
    std::lock_guard lock(mutex_);
    engines_.erase(std::remove_if(engines_.begin(), engines_.end(), [&](const RunningEngine& e) { return e.row_id == engine.row_id; }),
                   engines_.end());
    stopping_.erase(engine.row_id);
}

std::string EngineSupervisor::logs(const RunningEngine& engine, std::size_t lines) const {
    const auto it = drivers_.find(engine.handle.driver);
    return it == drivers_.end() ? std::string() : it->second->logs(engine.handle, lines);
}

std::vector<RunningEngine> EngineSupervisor::check() {
    std::vector<RunningEngine> exited;
    for (const auto& engine : engines()) {
        auto it = drivers_.find(engine.handle.driver);
        if (it == drivers_.end()) continue;
        const auto being_stopped = [&] {
            std::lock_guard lock(mutex_);
            return stopping_.count(engine.row_id) > 0;
        };
        if (being_stopped()) continue;
        const Probe p = it->second->probe(engine.handle);
        // A stop that began while it was probed ends the engine too, and records that itself.
        if (p.state == RunState::running || being_stopped()) continue;
        spdlog::warn("engine {} ({} revision {}) exited{}", engine.handle.engine_id, to_string(engine.role), engine.revision_id,
                     p.exit_code ? " with code " + std::to_string(*p.exit_code) : std::string());
        ledger_.record_engine_stop(engine.row_id, p.exit_code);
        exited.push_back(engine);
        std::lock_guard lock(mutex_);
        engines_.erase(std::remove_if(engines_.begin(), engines_.end(), [&](const RunningEngine& e) { return e.row_id == engine.row_id; }),
                       engines_.end());
    }
    return exited;
}

void EngineSupervisor::adopt() {
    std::vector<std::string> kinds;
    for (const auto& [kind, d] : drivers_) kinds.push_back(kind);
    adopt_kinds(kinds);
    // Records of a kind this configuration does not run (the placement changed since): nothing
    // here can reach those engines again.
    for (const auto& r : ledger_.running_engines()) {
        if (drivers_.count(r.driver)) continue;
        spdlog::warn("engine {} ran as a {} engine, which this configuration does not run: its record is closed{}", r.engine_key, r.driver,
                     r.job_id ? "; cancel Slurm job " + *r.job_id + " if it still runs" : std::string());
        ledger_.record_engine_stop(r.id, std::nullopt);
    }
}

std::optional<std::string> EngineSupervisor::unadopted(const std::string& kind) const {
    std::lock_guard lock(mutex_);
    const auto it = unadopted_.find(kind);
    return it == unadopted_.end() ? std::nullopt : std::optional<std::string>(it->second);
}

std::vector<RunningEngine> EngineSupervisor::adopt_kinds(const std::vector<std::string>& kinds) {
    // One adoption at a time: the reconciler's retries and a start's would both take a job.
    std::lock_guard adopting(adoption_mutex_);
    const auto rows = ledger_.running_engines();
    std::map<std::string, state::EngineRow> by_key;
    for (const auto& r : rows)
        if (!r.engine_key.empty()) by_key[r.engine_key] = r;
    std::set<state::Id> tracked;
    for (const auto& e : engines()) tracked.insert(e.row_id);
    std::vector<RunningEngine> adopted;
    std::set<std::string> answered;
    for (const auto& kind : kinds) {
        Driver& d = *drivers_.at(kind);
        // Only ask the container runtime when the ledger says a container of ours may run. (The
        // Slurm drivers ask the cluster only when they hold a record, which they write before
        // submitting: a job submitted by a run killed before the ledger knew it is found and stopped.)
        if (kind == "container" && std::none_of(rows.begin(), rows.end(), [](const state::EngineRow& r) { return r.driver == "container"; })) {
            answered.insert(kind);
            continue;
        }
        std::vector<EngineHandle> handles;
        try {
            handles = d.adopt();
        } catch (const std::exception& e) {
            // Its engines may well still run (a cluster's jobs do not end because slurmrestd is
            // down): their records stay open, nothing replaces them, and adopt_pending asks again.
            std::lock_guard lock(mutex_);
            if (!unadopted_.count(kind))
                spdlog::warn("cannot adopt {} engines yet: {}; their ledger records stay open and adoption is tried again every {} s", kind,
                             e.what(), std::chrono::duration_cast<std::chrono::seconds>(kAdoptionRetry).count());
            unadopted_[kind] = e.what();
            continue;
        }
        answered.insert(kind);
        for (auto& h : handles) {
            if (h.driver != kind) continue;  // the embedded and process drivers share a state directory
            auto row = by_key.find(h.engine_id);
            if (row != by_key.end() && tracked.count(row->second.id)) continue;  // started since the first try
            if (row == by_key.end() || !row->second.revision_id) {
                spdlog::warn("engine {} carries our records but the ledger does not know it: stopping it", h.engine_id);
                d.stop(h, std::chrono::seconds(5));
                continue;
            }
            RunningEngine e{row->second.id, *row->second.revision_id, engine_role_from(row->second.role), h};
            spdlog::info("adopted engine {} ({} of revision {}) on {}:{}", h.engine_id, to_string(e.role), e.revision_id, h.host, h.port);
            tracked.insert(e.row_id);
            adopted.push_back(e);
            std::lock_guard lock(mutex_);
            engines_.push_back(std::move(e));
        }
    }
    for (const auto& r : rows)
        if (answered.count(r.driver) && !tracked.count(r.id)) ledger_.record_engine_stop(r.id, std::nullopt);
    std::lock_guard lock(mutex_);
    for (const auto& kind : answered)
        if (unadopted_.erase(kind)) spdlog::info("{} engines adopted again", kind);
    next_adoption_ = std::chrono::steady_clock::now() + kAdoptionRetry;
    return adopted;
}

std::vector<RunningEngine> EngineSupervisor::adopt_pending() {
    std::vector<std::string> kinds;
    {
        std::lock_guard lock(mutex_);
        if (unadopted_.empty() || std::chrono::steady_clock::now() < next_adoption_) return {};
        for (const auto& [kind, why] : unadopted_) kinds.push_back(kind);
    }
    return adopt_kinds(kinds);
}

std::optional<std::string> EngineSupervisor::awaiting_adoption(EngineRole role) const {
    std::map<std::string, std::string> unadopted;
    {
        std::lock_guard lock(mutex_);
        if (unadopted_.empty()) return std::nullopt;
        unadopted = unadopted_;
    }
    for (const auto& r : ledger_.running_engines()) {
        const auto why = unadopted.find(r.driver);
        if (why == unadopted.end() || engine_role_from(r.role) != role) continue;
        return "engine " + r.engine_key + (r.job_id ? " (Slurm job " + *r.job_id + ")" : std::string()) + " of an earlier run may still be " +
               std::string(to_string(role)) + ", and cannot be adopted yet: " + why->second;
    }
    return std::nullopt;
}

std::vector<RunningEngine> EngineSupervisor::engines() const {
    std::lock_guard lock(mutex_);
    return engines_;
}

bool EngineSupervisor::answers(const RunningEngine& engine) const {
    return models_list(engine.handle.host, engine.handle.port, engine.handle.served_model_name, std::chrono::seconds(5), engine.handle.api_key);
}

}  // namespace anvil::drivers
