// Launch resolution: a recipe's launch block turned into exactly what a driver executes.
// Placeholders come from configuration (an unknown one is an error, never ""), mount sources must
// stay inside the allowed roots, and the port is allocated from a range and checked free.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "registry/recipe.hpp"

namespace anvil::drivers {

// A launch that cannot be resolved: the message names the recipe field and what to change.
struct LaunchError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct LaunchConfig {
    std::map<std::string, std::string> placeholders;  // MODEL_ROOT, CACHE_ROOT, … (PORT and HOST are added)
    std::vector<std::filesystem::path> allowed_roots;  // mount sources and model paths must resolve inside one
    std::string host = "127.0.0.1";
    int port_first = 20000;  // inclusive range engines' ports are allocated from
    int port_last = 20999;
    std::vector<std::string> gpu_uuids;  // the GPUs this engine gets, by UUID
    std::chrono::milliseconds ready_timeout{std::chrono::seconds(600)};  // unless the recipe's launch.ready_timeout_seconds says
};

struct ResolvedMount {
    std::filesystem::path source;  // canonical, inside an allowed root
    std::string target;
    bool read_only = true;
};

struct ResolvedLaunch {
    std::string recipe_id;
    std::string kind;                                // the recipe's launch.kind
    std::vector<std::string> arguments;              // expanded; an argv, never a shell string
    std::map<std::string, std::string> environment;  // expanded; passed exactly
    std::vector<ResolvedMount> mounts;
    std::optional<std::filesystem::path> model_path;  // canonical, inside an allowed root
    std::optional<registry::Draft> draft;              // the recipe's launch.draft (embedded launches)
    std::optional<std::filesystem::path> draft_model_path;  // its model's directory: canonical, inside an allowed root
    std::optional<std::string> image;
    std::optional<std::int64_t> container_port;
    std::optional<std::string> ipc;
    std::optional<std::string> shm_size;
    std::string host;
    int port = 0;
    std::string served_model_name;  // the id /v1/models must list before the engine is ready
    std::vector<std::string> gpu_uuids;
    std::int64_t gpu_count = 0;  // the recipe's GPUs (hardware_count; 0 when it runs on the CPU)
    // The engine's host memory judged on paper (an embedded recipe's weights and KV cache, the upper
    // bound); 0 when not sized. A Slurm job asks for at least this.
    std::int64_t memory_bytes = 0;
    std::chrono::milliseconds ready_timeout{std::chrono::seconds(600)};
    // The bearer token the engine is started with (anvil-engine: ANVIL_ENGINE_API_KEY); empty: none.
    std::string api_key;
};

// Replaces every ${NAME} in `text`; `where` names the field for the error ("/launch/arguments/3").
std::string expand_placeholders(std::string_view text, const std::map<std::string, std::string>& values,
                                std::string_view where);

// The canonical path of `path` if it lies inside one of `roots` after resolving symlinks and "..";
// a path that escapes (or any ".." component at all) is a LaunchError.
std::filesystem::path resolve_inside_roots(const std::filesystem::path& path,
                                           const std::vector<std::filesystem::path>& roots, std::string_view where);

// Whether a TCP port can be bound on `host` right now.
bool port_is_free(const std::string& host, int port);
// The first port in [first, last] that is free and not in `taken`; a LaunchError if none is.
int allocate_port(const std::string& host, int first, int last, const std::set<int>& taken = {});

// What resolve_launch would refuse whatever the moment, judged on paper before anything starts:
// refused variables in launch.environment, flags anvil owns in launch.arguments, and mount sources or a model path outside the allowed roots
// (or with a placeholder nobody configured); the draft model's path is judged as the model's. One
// line naming the field, or nothing.
std::optional<std::string> paper_refusal(const registry::Recipe& recipe, const LaunchConfig& config);

// Resolves `recipe`'s launch with `config`. `taken` holds ports already handed to other engines.
// Refuses what paper_refusal refuses. A native launch of an engine anvil knows by name gets the
// flags anvil owns (model, host, port: registry::engine_flags) appended to its arguments.
ResolvedLaunch resolve_launch(const registry::Recipe& recipe, const LaunchConfig& config,
                              const std::set<int>& taken = {});

}  // namespace anvil::drivers
