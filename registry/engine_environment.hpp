// Which variables a recipe may not put in its engine's environment: those that make the dynamic
// loader or libc load code, or read configuration, from wherever the registry author points. A
// recipe is a launch contract pinned by digest; LD_PRELOAD=/any/library.so would run code nothing
// pins inside the engine. The list follows glibc's unsecure-envvars.h (what ld.so drops from a
// setuid program), plus the shells' startup files. One rule, used on paper (anvild rejects the
// recipe before anything starts, `anvil registry check` warns) and again at launch.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "registry/recipe.hpp"

namespace anvil::registry {

// Why `name` may not be set in an engine's environment, or nothing when it may.
std::optional<std::string> refused_environment_variable(std::string_view name);

// The first variable of `launch.environment` that is refused, as one line naming its JSON pointer
// and what to do, or nothing.
std::optional<std::string> environment_refusal(const Launch& launch);

}  // namespace anvil::registry
