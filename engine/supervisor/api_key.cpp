#include "engine/supervisor/api_key.hpp"

#include <sys/random.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "engine/supervisor/driver.hpp"

namespace anvil::driver {

std::string fresh_api_key() {
    unsigned char bytes[32];
    std::size_t filled = 0;
    while (filled < sizeof bytes) {
        const ssize_t n = ::getrandom(bytes + filled, sizeof bytes - filled, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw EngineError(std::string("cannot make an engine key: getrandom: ") + std::strerror(errno));
        filled += static_cast<std::size_t>(n);
    }
    static const char* hex = "0123456789abcdef";
    std::string key;
    for (unsigned char b : bytes) key += {hex[b >> 4], hex[b & 15]};
    return key;
}

std::optional<std::string> api_key_variable(const std::string& launch_kind, const std::string& engine_name) {
    std::string name = engine_name;
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (launch_kind == "embedded" || name == "anvil-engine") return "ANVIL_ENGINE_API_KEY";
    if (name == "vllm") return "VLLM_API_KEY";
    if (name == "llama.cpp" || name == "llama-server" || name == "llama-cpp") return "LLAMA_API_KEY";
    return std::nullopt;
}

void assign_api_key(ResolvedLaunch& launch, const std::string& engine_name) {
    const auto variable = api_key_variable(launch.kind, engine_name);
    if (!variable) return;
    // Always a fresh key: a recipe may not set this variable (registry/engine_environment), so
    // no registry author knows the key of an engine anvil starts.
    launch.api_key = fresh_api_key();
    launch.environment[*variable] = launch.api_key;
}

}  // namespace anvil::driver
