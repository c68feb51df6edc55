// Engine API keys: anvild starts each engine with a key of its own, so that only the qualifier and
// the stable endpoint (which send it) can use the engine's port, not every local process.
#pragma once

#include <optional>
#include <string>

#include "daemon/drivers/launch_resolution.hpp"

namespace anvil::drivers {

// A new random key (256 bits from getrandom, hex).
std::string fresh_api_key();

// The environment variable through which an engine takes its key: ANVIL_ENGINE_API_KEY for the
// embedded engine, VLLM_API_KEY for vLLM, LLAMA_API_KEY for llama.cpp's server. None for engines
// that take a key only as a flag (SGLang's --api-key): argv is readable by every local user.
std::optional<std::string> api_key_variable(const std::string& launch_kind, const std::string& engine_name);

// Gives `launch` a fresh key, put into the environment variable its engine reads (a recipe may not
// set that variable). Engines with no variable get none.
void assign_api_key(ResolvedLaunch& launch, const std::string& engine_name);

}  // namespace anvil::drivers
