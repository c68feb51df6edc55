#include "daemon/drivers/api_key.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "daemon/drivers/driver.hpp"
#include "support/random.hpp"
#include "support/text.hpp"

namespace anvil::drivers {

std::string fresh_api_key() {
    try {
        return support::random_hex(32);
    } catch (const std::exception& e) {
        throw EngineError(std::string("cannot make an engine key: ") + e.what());
    }
}

std::optional<std::string> api_key_variable(const std::string& launch_kind, const std::string& engine_name) {
    const std::string name = support::ascii_lower(engine_name);
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

}  // namespace anvil::drivers
