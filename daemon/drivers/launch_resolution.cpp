#include "daemon/drivers/launch_resolution.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/ranges.h>

#include "registry/engine_environment.hpp"
#include "registry/owned_flags.hpp"

namespace anvil::drivers {

namespace fs = std::filesystem;

std::string expand_placeholders(std::string_view text, const std::map<std::string, std::string>& values,
                                std::string_view where) {
    std::string out;
    out.reserve(text.size());
    size_t i = 0;
    while (i < text.size()) {
        const size_t open = text.find("${", i);
        if (open == std::string_view::npos) {
            out.append(text.substr(i));
            break;
        }
        out.append(text.substr(i, open - i));
        const size_t close = text.find('}', open + 2);
        if (close == std::string_view::npos)
            throw LaunchError(std::string(where) + ": unterminated placeholder in '" + std::string(text) +
                              "'; write ${NAME}");
        const std::string name(text.substr(open + 2, close - open - 2));
        auto it = values.find(name);
        if (it == values.end()) {
            std::vector<std::string> names;
            for (const auto& [known_name, value] : values) names.push_back(known_name);
            const std::string known = values.empty() ? "(none configured)" : fmt::format("{}", fmt::join(names, ", "));
            throw LaunchError(std::string(where) + ": unknown placeholder ${" + name + "}; configure it or use one of: " + known);
        }
        out.append(it->second);
        i = close + 1;
    }
    return out;
}

namespace {

bool is_inside(const fs::path& path, const fs::path& root) {
    auto p = path.begin();
    for (auto r = root.begin(); r != root.end(); ++r, ++p) {
        if (r->empty()) continue;  // a trailing separator in the root
        if (p == path.end() || *p != *r) return false;
    }
    return true;
}

struct Root {
    fs::path configured;  // as the configuration names it, for messages
    fs::path real;        // symlinks resolved
};

// Each root once: model_root may also be listed in allowed_mount_roots, or two names may resolve
// to one directory, and a refusal that lists a root twice reads as two different places.
std::vector<Root> distinct_roots(const std::vector<fs::path>& roots) {
    std::vector<Root> out;
    for (const auto& root : roots) {
        std::error_code ec;
        fs::path real = fs::weakly_canonical(root, ec);
        if (ec) continue;
        if (!real.has_filename()) real = real.parent_path();  // "/models/" and "/models" are one root
        if (std::none_of(out.begin(), out.end(), [&](const Root& r) { return r.real == real; })) out.push_back({root, real});
    }
    return out;
}

}  // namespace

fs::path resolve_inside_roots(const fs::path& path, const std::vector<fs::path>& roots, std::string_view where) {
    if (!path.is_absolute())
        throw LaunchError(std::string(where) + ": '" + path.string() + "' is not an absolute path; start it with a placeholder such as ${MODEL_ROOT}");
    for (const auto& part : path)
        if (part == "..") throw LaunchError(std::string(where) + ": '" + path.string() + "' contains '..'; name the directory directly");
    if (roots.empty()) throw LaunchError(std::string(where) + ": no allowed roots are configured for mount sources and models");
    std::error_code ec;
    // weakly_canonical resolves the symlinks of the part that exists, so a link pointing out of a root is seen.
    const fs::path real = fs::weakly_canonical(path, ec);
    if (ec) throw LaunchError(std::string(where) + ": cannot resolve '" + path.string() + "': " + ec.message());
    const auto allowed = distinct_roots(roots);
    for (const auto& root : allowed)
        if (is_inside(real, root.real)) return real;
    std::vector<std::string> list;
    for (const auto& root : allowed) list.push_back(root.configured.string());
    throw LaunchError(fmt::format("{}: '{}' resolves to '{}', outside the allowed roots ({}); move it under one of them or configure "
                                  "allowed_mount_roots",
                                  where, path.string(), real.string(), fmt::join(list, ", ")));
}

bool port_is_free(const std::string& host, int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) addr.sin_addr.s_addr = htonl(INADDR_ANY);
    // No SO_REUSEADDR: a port in TIME_WAIT would also refuse the engine's own bind on some stacks.
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    return ok;
}

int allocate_port(const std::string& host, int first, int last, const std::set<int>& taken) {
    if (first < 1 || last > 65535 || first > last)
        throw LaunchError("the port range " + std::to_string(first) + "-" + std::to_string(last) + " is not valid; configure 1 <= first <= last <= 65535");
    for (int port = first; port <= last; ++port)
        if (!taken.count(port) && port_is_free(host, port)) return port;
    throw LaunchError("no free port in " + std::to_string(first) + "-" + std::to_string(last) + " on " + host +
                      "; stop an engine or widen the configured range");
}

namespace {

std::map<std::string, std::string> placeholder_values(const LaunchConfig& config, int port) {
    auto values = config.placeholders;
    values["PORT"] = std::to_string(port);
    values["HOST"] = config.host;
    return values;
}

std::string field_prefix(const registry::Recipe& recipe) { return "recipe " + recipe.id + " at /launch/"; }

// What a recipe may not put in its launch whatever the paths: refused variables in its environment
// (registry/engine_environment) and flags the driver owns in its arguments (registry/owned_flags).
void refuse_launch_contract(const registry::Recipe& recipe) {
    if (auto why = registry::environment_refusal(recipe.launch)) throw LaunchError("recipe " + recipe.id + ": " + *why);
    if (auto why = registry::owned_flag_refusal(recipe)) throw LaunchError("recipe " + recipe.id + ": " + *why);
}

// A native launch of an engine anvil knows by name gets the flags anvil owns from here, after the
// recipe's own (which name none of them): the model from launch.model, the allocated address.
void append_owned_flags(const registry::Recipe& recipe, ResolvedLaunch& out) {
    if (recipe.launch.kind != "native") return;  // embedded_argv gives anvil-engine its own
    const auto flags = registry::engine_flags(recipe);
    if (!flags) return;
    if (out.model_path && !flags->model_flag.empty()) {
        // vLLM's model is the word after `serve` (it wins over --model): it goes there.
        const auto subcommand = flags->model_after.empty() ? out.arguments.end()
                                                           : std::find(out.arguments.begin(), out.arguments.end(), flags->model_after);
        if (subcommand != out.arguments.end()) out.arguments.insert(subcommand + 1, out.model_path->string());
        else out.arguments.insert(out.arguments.end(), {std::string(flags->model_flag), out.model_path->string()});
    }
    if (!flags->served_name_flag.empty() && !out.served_model_name.empty())
        out.arguments.insert(out.arguments.end(), {std::string(flags->served_name_flag), out.served_model_name});
    out.arguments.insert(out.arguments.end(), {std::string(flags->host_flag), out.host, std::string(flags->port_flag), std::to_string(out.port)});
}

// Mount sources and the model path, each inside an allowed root.
void resolve_paths(const registry::Recipe& recipe, const LaunchConfig& config, const std::map<std::string, std::string>& values,
                   ResolvedLaunch& out) {
    const std::string at = field_prefix(recipe);
    for (size_t i = 0; i < recipe.launch.mounts.size(); ++i) {
        const auto& m = recipe.launch.mounts[i];
        const std::string where = at + "mounts/" + std::to_string(i);
        const fs::path source = expand_placeholders(m.source, values, where + "/source");
        out.mounts.push_back({resolve_inside_roots(source, config.allowed_roots, where + "/source"),
                              expand_placeholders(m.target, values, where + "/target"), m.read_only});
    }
    if (recipe.launch.model) {
        const fs::path path = expand_placeholders(recipe.launch.model->path, values, at + "model/path");
        out.model_path = resolve_inside_roots(path, config.allowed_roots, at + "model/path");
    }
    if (recipe.launch.draft && recipe.launch.draft->model) {
        const fs::path path = expand_placeholders(recipe.launch.draft->model->path, values, at + "draft/model/path");
        out.draft_model_path = resolve_inside_roots(path, config.allowed_roots, at + "draft/model/path");
    }
}

}  // namespace

std::optional<std::string> paper_refusal(const registry::Recipe& recipe, const LaunchConfig& config) {
    try {
        refuse_launch_contract(recipe);
        ResolvedLaunch scratch;
        resolve_paths(recipe, config, placeholder_values(config, 0), scratch);  // no port is needed to place a path
    } catch (const LaunchError& e) {
        return e.what();
    }
    return std::nullopt;
}

ResolvedLaunch resolve_launch(const registry::Recipe& recipe, const LaunchConfig& config, const std::set<int>& taken) {
    refuse_launch_contract(recipe);  // refused on paper already; checked again so no path around it starts one
    ResolvedLaunch out;
    out.recipe_id = recipe.id;
    out.kind = recipe.launch.kind;
    out.host = config.host;
    out.port = allocate_port(config.host, config.port_first, config.port_last, taken);
    out.gpu_uuids = config.gpu_uuids;
    out.gpu_count = recipe.runs_on_cpu() ? 0 : recipe.hardware_count;
    out.ready_timeout = recipe.launch.ready_timeout_seconds ? std::chrono::seconds(*recipe.launch.ready_timeout_seconds) : config.ready_timeout;
    out.container_port = recipe.launch.container_port;
    out.ipc = recipe.launch.ipc;
    out.shm_size = recipe.launch.shm_size;
    out.draft = recipe.launch.draft;

    const auto values = placeholder_values(config, out.port);
    const std::string at = field_prefix(recipe);
    for (size_t i = 0; i < recipe.launch.arguments.size(); ++i)
        out.arguments.push_back(expand_placeholders(recipe.launch.arguments[i], values, at + "arguments/" + std::to_string(i)));
    for (const auto& [name, value] : recipe.launch.environment)
        out.environment[name] = expand_placeholders(value, values, at + "environment/" + name);
    resolve_paths(recipe, config, values, out);
    if (recipe.launch.image) out.image = expand_placeholders(*recipe.launch.image, values, at + "image");
    if (auto name = recipe.served_model_name()) out.served_model_name = *name;
    else if (out.model_path) out.served_model_name = out.model_path->filename().string();
    append_owned_flags(recipe, out);
    return out;
}

}  // namespace anvil::drivers
