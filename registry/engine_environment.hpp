// Which variables a recipe may put in its engine's environment. A recipe is a launch contract
// pinned by digest; a variable that makes a loader, libc, the CUDA stack, NCCL, OpenMP, Python or
// the engine load code or plugins from wherever the registry author points (LD_PRELOAD,
// CUDA_INJECTION64_PATH, ANVIL_ENGINE_CUDA_PLUGIN, PYTHONPATH, ...) would run code nothing pins.
// Three policies, by where the engine runs:
// - anvil-engine (launch kind embedded): an allowlist, the variables anvil-engine documents as safe
//   (threads, kernel level, logging); anything else is refused.
// - a host process (native, script, ...): a denylist of every variable known to load code or
//   plugins, to choose what program runs, or that anvil owns (the engine's key, the GPUs it gets).
//   Such a recipe runs software the operator installed; the list keeps the recipe from changing it.
// - a container: the variables go to the program inside the image, which its digest pins; only
//   the loader's and glibc's variables and the variables anvil owns are refused.
// One rule, used on paper (anvild rejects the recipe before anything starts, `anvil registry
// check` warns) and again at launch.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "registry/recipe.hpp"

namespace anvil::registry {

enum class EnvironmentPolicy { engine_allowlist, host_process, container };

// The policy a launch kind's environment is judged by.
EnvironmentPolicy environment_policy(std::string_view launch_kind);

// The variables an embedded (anvil-engine) recipe may set.
std::span<const std::string_view> engine_environment_allowlist();

// Why `name` may not be set in an engine's environment under `policy`, or nothing when it may.
std::optional<std::string> refused_environment_variable(std::string_view name, EnvironmentPolicy policy);

// The first variable of `launch.environment` that is refused, as one line naming its JSON pointer
// and what to do, or nothing.
std::optional<std::string> environment_refusal(const Launch& launch);

}  // namespace anvil::registry
