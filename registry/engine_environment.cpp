#include "registry/engine_environment.hpp"

#include <algorithm>
#include <array>

#include "registry/json_reader.hpp"

namespace anvil::registry {

namespace {

// glibc's unsecure-envvars.h (less TMPDIR and TZDIR, which load nothing), and the files bash and
// sh run before a `-c` script.
constexpr std::array<std::string_view, 13> kRefusedNames = {
    "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH", "MALLOC_TRACE",
    "NIS_PATH",   "NLSPATH",     "RESOLV_HOST_CONF", "RES_OPTIONS", "BASH_ENV",  "ENV",
};

}  // namespace

std::optional<std::string> refused_environment_variable(std::string_view name) {
    if (name.empty() || name.find('=') != std::string_view::npos || name.find('\0') != std::string_view::npos)
        return "is not a variable name (empty, or holds '=' or NUL)";
    if (name.starts_with("LD_"))
        return "is a dynamic-loader variable (LD_*): it would load code or libraries that the recipe does not pin into the engine";
    if (std::find(kRefusedNames.begin(), kRefusedNames.end(), name) != kRefusedNames.end())
        return "makes libc or the shell load code or configuration from a path the recipe chooses (glibc's unsecure variables)";
    return std::nullopt;
}

std::optional<std::string> environment_refusal(const Launch& launch) {
    for (const auto& [name, value] : launch.environment) {
        if (auto why = refused_environment_variable(name))
            return "launch.environment at /launch/environment/" + escape_pointer_token(name) + ": " + render_short(nlohmann::json(name)) +
                   " " + *why + "; anvild refuses LD_* and glibc's unsecure variables, remove it from the recipe";
    }
    return std::nullopt;
}

}  // namespace anvil::registry
