#include "engine/driver/container_driver.hpp"

#include <fstream>
#include <random>
#include <sstream>

#include <spdlog/spdlog.h>

#include "engine/driver/command_runner.hpp"
#include "engine/driver/readiness.hpp"
#include "registry/pinning.hpp"

extern char** environ;

namespace anvil::driver {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
    return s;
}

std::string first_line(const std::string& s) {
    const std::string t = trim(s);
    const auto nl = t.rfind('\n');
    return nl == std::string::npos ? t : t.substr(nl + 1);
}

std::string random_suffix() {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    static const char* hex = "0123456789abcdef";
    std::string s(8, '0');
    for (auto& c : s) c = hex[rng() & 15];
    return s;
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

std::string label(const json& labels, const char* name) {
    return labels.is_object() && labels.contains(name) && labels[name].is_string() ? labels[name].get<std::string>() : "";
}

}  // namespace

std::vector<std::string> container_run_arguments(const ContainerDriverOptions& o, const EngineHandle& e, const ResolvedLaunch& l) {
    std::vector<std::string> a = {"run", "--detach", "--name", "anvil-" + e.engine_id};
    for (const auto& [k, v] : std::map<std::string, std::string>{{"anvil.owner", o.owner},
                                                                 {"anvil.engine", e.engine_id},
                                                                 {"anvil.recipe", e.recipe.recipe_id},
                                                                 {"anvil.revision", e.recipe.revision},
                                                                 {"anvil.host", e.host},
                                                                 {"anvil.port", std::to_string(e.port)},
                                                                 {"anvil.served-model-name", e.served_model_name}}) {
        a.push_back("--label");
        a.push_back(k + "=" + v);
    }
    a.push_back("--network=" + o.network);
    if (o.network != "host" && l.container_port) {
        a.push_back("--publish");
        a.push_back(l.host + ":" + std::to_string(l.port) + ":" + std::to_string(*l.container_port));
    }
    if (l.ipc) a.push_back("--ipc=" + *l.ipc);
    if (l.shm_size) a.push_back("--shm-size=" + *l.shm_size);
    a.push_back("--log-opt");
    a.push_back("max-size=" + std::to_string(o.log_cap_bytes));
    auto env = l.environment;
    if (!l.gpu_uuids.empty()) {
        // Inside the container the selected GPUs are numbered from 0, whatever their host indices.
        std::string indices;
        for (size_t i = 0; i < l.gpu_uuids.size(); ++i) {
            a.push_back("--device");
            a.push_back("nvidia.com/gpu=" + l.gpu_uuids[i]);
            indices += (i ? "," : "") + std::to_string(i);
        }
        env["CUDA_VISIBLE_DEVICES"] = indices;
    }
    for (const auto& [k, v] : env) {
        a.push_back("--env");
        a.push_back(k + "=" + v);
    }
    for (const auto& m : l.mounts) {
        a.push_back("--volume");
        a.push_back(m.source.string() + ":" + m.target + (m.read_only ? ":ro" : ""));
    }
    a.push_back(*l.image);
    a.insert(a.end(), l.arguments.begin(), l.arguments.end());
    return a;
}

ContainerDriver::ContainerDriver(ContainerDriverOptions options) : options_(std::move(options)) {
    fs::create_directories(options_.state_dir);
}

std::vector<std::string> ContainerDriver::cli(std::vector<std::string> arguments) const {
    std::vector<std::string> argv = {options_.runtime};
    argv.insert(argv.end(), options_.global_arguments.begin(), options_.global_arguments.end());
    argv.insert(argv.end(), arguments.begin(), arguments.end());
    return argv;
}

json ContainerDriver::inspect(const std::string& container) const {
    const auto r = run_command(cli({"container", "inspect", container}), cli_environment(options_.runtime_env));
    if (!r.ok()) return nullptr;
    const json j = json::parse(r.out, nullptr, false);
    return j.is_array() && !j.empty() ? j[0] : json(nullptr);
}

EngineHandle ContainerDriver::start(const RecipeRevision& recipe, const ResolvedLaunch& launch) {
    if (!launch.image) throw LaunchError("recipe " + launch.recipe_id + ": a container launch needs /launch/image");
    const auto pinned = registry::image_digest(*launch.image);
    if (!registry::is_pinned_image(*launch.image) || !pinned)
        throw LaunchError("recipe " + launch.recipe_id + ": image '" + *launch.image +
                          "' is not pinned by digest; write it as name@sha256:<64 hex>");
    EngineHandle e;
    e.engine_id = recipe.recipe_id + "-" + random_suffix();
    e.driver = "container";
    e.recipe = recipe;
    e.host = launch.host;
    e.port = launch.port;
    e.served_model_name = launch.served_model_name;
    e.directory = options_.state_dir / e.engine_id;
    e.log_path = e.directory / "engine.log";
    fs::create_directories(e.directory);

    const auto env = cli_environment(options_.runtime_env);
    const auto r = run_command(cli(container_run_arguments(options_, e, launch)), env);
    if (!r.ok())
        throw EngineError("recipe " + recipe.recipe_id + ": " + options_.runtime + " run failed (exit " + std::to_string(r.exit_code) +
                          "): " + first_line(r.err));
    e.container_id = first_line(r.out);
    const json info = inspect(e.container_id);
    // The digest the runtime resolved the reference to must be the pinned one: anything else is drift.
    std::string running = info.is_object() ? info.value("ImageDigest", "") : "";
    if (running.empty() && info.is_object()) {
        const auto image = run_command(cli({"image", "inspect", info.value("Image", "")}), env);
        const json ij = json::parse(image.out, nullptr, false);
        if (ij.is_array() && !ij.empty())
            for (const auto& d : ij[0].value("RepoDigests", json::array()))
                if (d.is_string() && registry::image_digest(d.get<std::string>()) == pinned) running = *pinned;
    }
    if (running != *pinned) {
        remove(e);
        throw EngineError("recipe " + recipe.recipe_id + ": container runs image " + (running.empty() ? "(unknown digest)" : running) +
                          ", not the pinned " + *pinned + "; the image drifted, pull it by digest again");
    }
    spdlog::info("started engine {} (recipe {} at {}) as container {}, image {}", e.engine_id, recipe.recipe_id, recipe.revision,
                 e.container_id.substr(0, 12), registry::abbreviate(*pinned));
    return e;
}

Probe ContainerDriver::probe(const EngineHandle& e) {
    Probe p;
    const json info = inspect(e.container_id);
    if (!info.is_object()) return p;
    const json state = info.value("State", json::object());
    const std::string status = state.value("Status", "");
    if (status == "running") {
        p.state = RunState::running;
        if (e.port > 0) p.healthy = health_ok(e.host, e.port, std::chrono::milliseconds(1000));
    } else if (status == "created" || status == "configured" || status == "initialized") {
        p.state = RunState::running;  // starting
    } else {
        p.state = RunState::exited;
        if (state.contains("ExitCode") && state["ExitCode"].is_number_integer()) p.exit_code = state["ExitCode"].get<int>();
    }
    return p;
}

void ContainerDriver::save_logs(const EngineHandle& e) const {
    const auto r = run_command(cli({"logs", e.container_id}), cli_environment(options_.runtime_env));
    std::string text = r.out + r.err;
    if (text.size() > options_.log_cap_bytes) text = text.substr(text.size() - options_.log_cap_bytes);
    std::ofstream(e.log_path, std::ios::trunc) << text;
}

void ContainerDriver::remove(const EngineHandle& e) const {
    save_logs(e);
    if (options_.keep_stopped) return;
    const auto r = run_command(cli({"rm", "--force", e.container_id}), cli_environment(options_.runtime_env));
    if (!r.ok()) spdlog::warn("engine {}: cannot remove container {}: {}", e.engine_id, e.container_id, first_line(r.err));
}

void ContainerDriver::stop(const EngineHandle& e, std::chrono::milliseconds grace) {
    const auto seconds = std::max<long long>(0, (grace.count() + 999) / 1000);
    const auto r = run_command(cli({"stop", "--time", std::to_string(seconds), e.container_id}), cli_environment(options_.runtime_env));
    if (!r.ok()) spdlog::warn("engine {}: {} stop: {}", e.engine_id, options_.runtime, first_line(r.err));
    remove(e);
    spdlog::info("stopped engine {} (container {})", e.engine_id, e.container_id.substr(0, 12));
}

std::vector<EngineHandle> ContainerDriver::adopt() {
    const auto env = cli_environment(options_.runtime_env);
    const auto r = run_command(cli({"ps", "--all", "--quiet", "--no-trunc", "--filter", "label=anvil.owner=" + options_.owner}), env);
    if (!r.ok()) throw EngineError(options_.runtime + " ps failed: " + first_line(r.err) + "; check the container runtime works");
    std::vector<EngineHandle> adopted;
    std::istringstream ids(r.out);
    std::string id;
    while (ids >> id) {
        const json info = inspect(id);
        if (!info.is_object()) continue;
        const json labels = info.value("Config", json::object()).value("Labels", json::object());
        EngineHandle e;
        e.container_id = info.value("Id", id);
        e.engine_id = label(labels, "anvil.engine");
        e.driver = "container";
        e.recipe = {label(labels, "anvil.recipe"), label(labels, "anvil.revision")};
        e.host = label(labels, "anvil.host");
        e.port = std::atoi(label(labels, "anvil.port").c_str());
        e.served_model_name = label(labels, "anvil.served-model-name");
        e.directory = options_.state_dir / e.engine_id;
        e.log_path = e.directory / "engine.log";
        fs::create_directories(e.directory);
        if (info.value("State", json::object()).value("Status", "") == "running") {
            spdlog::info("adopted engine {} (recipe {}), container {}", e.engine_id, e.recipe.recipe_id, e.container_id.substr(0, 12));
            adopted.push_back(std::move(e));
        } else if (!options_.keep_stopped) {
            spdlog::info("engine {} (recipe {}) is not running; removing container {}, keeping its log", e.engine_id,
                         e.recipe.recipe_id, e.container_id.substr(0, 12));
            remove(e);
        }
    }
    return adopted;
}

std::string ContainerDriver::logs(const EngineHandle& e, std::size_t tail) {
    const auto r = run_command(cli({"logs", "--tail", std::to_string(tail), e.container_id}), cli_environment(options_.runtime_env));
    if (r.ok()) return r.out + r.err;
    std::ifstream in(e.log_path);  // the container is gone: the logs saved when it was removed
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::size_t pos = text.size(), found = 0;
    if (pos > 0 && text[pos - 1] == '\n') --pos;
    while (pos > 0 && !(text[pos - 1] == '\n' && ++found == tail)) --pos;
    return text.substr(pos);
}

}  // namespace anvil::driver
