#include "daemon/drivers/container_driver.hpp"

#include <fstream>

#include <spdlog/spdlog.h>

#include "daemon/drivers/engine_record.hpp"
#include "daemon/drivers/log_tail.hpp"
#include "daemon/drivers/readiness.hpp"
#include "registry/pinning.hpp"

namespace anvil::drivers {

namespace fs = std::filesystem;

namespace {

std::string label(const std::map<std::string, std::string>& labels, const char* name) {
    const auto it = labels.find(name);
    return it == labels.end() ? "" : it->second;
}

}  // namespace

ContainerSpec container_spec(const ContainerDriverOptions& o, const EngineHandle& e, const ResolvedLaunch& l) {
    ContainerSpec s;
    s.name = "anvil-" + e.engine_id;
    s.image = l.image.value_or("");
    s.arguments = l.arguments;
    s.labels = {{"anvil.owner", o.owner},
                {"anvil.engine", e.engine_id},
                {"anvil.recipe", e.recipe.recipe_id},
                {"anvil.revision", e.recipe.revision},
                {"anvil.host", e.host},
                {"anvil.port", std::to_string(e.port)},
                {"anvil.served-model-name", e.served_model_name}};
    s.network = o.network;
    if (o.network != "host" && l.container_port) {
        s.publish_host = l.host;
        s.publish_port = l.port;
        s.container_port = *l.container_port;
    }
    s.ipc = l.ipc;
    s.shm_size = l.shm_size;
    s.log_cap_bytes = o.log_cap_bytes;
    s.environment = l.environment;
    if (!l.gpu_uuids.empty()) {
        // Inside the container the selected GPUs are numbered from 0, whatever their host indices.
        std::string indices;
        for (size_t i = 0; i < l.gpu_uuids.size(); ++i) {
            s.cdi_devices.push_back("nvidia.com/gpu=" + l.gpu_uuids[i]);
            indices += (i ? "," : "") + std::to_string(i);
        }
        s.environment["CUDA_VISIBLE_DEVICES"] = indices;
    }
    s.mounts = l.mounts;
    return s;
}

ContainerDriver::ContainerDriver(ContainerDriverOptions options)
    : options_(std::move(options)), backend_(options_.api_socket.empty() ? make_cli_backend(options_) : make_api_backend(options_)) {
    fs::create_directories(options_.state_dir);
}

std::optional<ContainerInfo> ContainerDriver::inspect(const std::string& container) const { return backend_->inspect(container); }

std::string ContainerDriver::running_digest(const ContainerInfo& info, const std::string& pinned) const {
    if (!info.image_digest.empty()) return info.image_digest;
    // docker (and the Engine API) report only the image id; its repository digests name the manifest.
    for (const auto& d : backend_->image_repo_digests(info.image_id))
        if (registry::image_digest(d) == pinned) return pinned;
    return "";
}

EngineHandle ContainerDriver::start(const RecipeRevision& recipe, const ResolvedLaunch& launch) {
    if (!launch.image) throw LaunchError("recipe " + launch.recipe_id + ": a container launch needs /launch/image");
    const auto pinned = registry::image_digest(*launch.image);
    if (!registry::is_pinned_image(*launch.image) || !pinned)
        throw LaunchError("recipe " + launch.recipe_id + ": image '" + *launch.image +
                          "' is not pinned by digest; write it as name@sha256:<64 hex>");
    EngineHandle e = new_engine_handle("container", recipe, launch, options_.state_dir);

    try {
        e.container_id = backend_->run(container_spec(options_, e, launch));
    } catch (const LaunchError& error) {
        throw LaunchError("recipe " + recipe.recipe_id + ": " + error.what());
    } catch (const EngineError& error) {
        throw EngineError("recipe " + recipe.recipe_id + ": " + error.what());
    }
    // The digest the runtime resolved the reference to must be the pinned one: anything else is drift.
    const auto info = backend_->inspect(e.container_id);
    const std::string running = info ? running_digest(*info, *pinned) : "";
    if (running != *pinned) {
        remove(e);
        throw EngineError("recipe " + recipe.recipe_id + ": container runs image " + (running.empty() ? "(unknown digest)" : running) +
                          ", not the pinned " + *pinned + "; the image drifted, pull it by digest again");
    }
    spdlog::info("started engine {} (recipe {} at {}) as container {} via {}, image {}", e.engine_id, recipe.recipe_id,
                 recipe.revision, e.container_id.substr(0, 12), backend_->describe(), registry::abbreviate(*pinned));
    return e;
}

Probe ContainerDriver::probe(const EngineHandle& e) {
    Probe p;
    const auto info = backend_->inspect(e.container_id);
    if (!info) return p;
    if (info->status == "running") {
        p.state = RunState::running;
        if (e.port > 0) p.healthy = health_ok(e.host, e.port, std::chrono::milliseconds(1000));
    } else if (info->status == "created" || info->status == "configured" || info->status == "initialized") {
        p.state = RunState::running;  // starting
    } else {
        p.state = RunState::exited;
        p.exit_code = info->exit_code;
    }
    return p;
}

void ContainerDriver::save_logs(const EngineHandle& e) const {
    std::string text = backend_->logs(e.container_id, std::nullopt).value_or("");
    if (text.size() > options_.log_cap_bytes) text = text.substr(text.size() - options_.log_cap_bytes);
    std::ofstream(e.log_path, std::ios::trunc) << text;
}

void ContainerDriver::remove(const EngineHandle& e) const {
    save_logs(e);
    if (!options_.keep_stopped) backend_->remove(e.container_id);
}

void ContainerDriver::stop(const EngineHandle& e, std::chrono::milliseconds grace) {
    backend_->stop(e.container_id, std::max<long long>(0, (grace.count() + 999) / 1000));
    remove(e);
    spdlog::info("stopped engine {} (container {})", e.engine_id, e.container_id.substr(0, 12));
}

std::vector<EngineHandle> ContainerDriver::adopt() {
    std::vector<EngineHandle> adopted;
    for (const auto& id : backend_->list_labelled("anvil.owner", options_.owner)) {
        const auto info = backend_->inspect(id);
        if (!info) continue;
        EngineHandle e;
        e.container_id = info->id.empty() ? id : info->id;
        e.engine_id = label(info->labels, "anvil.engine");
        e.driver = "container";
        e.recipe = {label(info->labels, "anvil.recipe"), label(info->labels, "anvil.revision")};
        e.host = label(info->labels, "anvil.host");
        e.port = std::atoi(label(info->labels, "anvil.port").c_str());
        e.served_model_name = label(info->labels, "anvil.served-model-name");
        e.directory = options_.state_dir / e.engine_id;
        e.log_path = e.directory / "engine.log";
        fs::create_directories(e.directory);
        if (info->status == "running") {
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
    if (auto text = backend_->logs(e.container_id, tail)) return *text;
    return log_tail(e.log_path, tail);  // the container is gone: the logs saved when it was removed
}

}  // namespace anvil::drivers
