#include "registry/owned_flags.hpp"

#include <algorithm>
#include <array>

namespace anvil::registry {

namespace {

constexpr auto kAnvilEngineOwned = std::to_array<std::string_view>(
    {"--model", "--host", "--port", "--served-model-name", "--api-key", "--device", "--draft-self", "--draft-model", "--draft-weights",
     "--draft-layers", "--draft-ngram", "--draft-tokens"});
constexpr auto kVllmOwned = std::to_array<std::string_view>({"--model", "--host", "--port", "--api-key", "--uds"});
constexpr auto kSglangOwned = std::to_array<std::string_view>({"--model-path", "--model", "--host", "--port", "--api-key"});
constexpr auto kLlamaServerOwned = std::to_array<std::string_view>(
    {"-m", "--model", "-mu", "--model-url", "-hf", "-hfr", "--hf-repo", "-hff", "--hf-file", "--host", "--port", "--api-key",
     "--api-key-file"});

constexpr EngineFlags kAnvilEngine{"anvil-engine", "--model", "--host", "--port", "--served-model-name", kAnvilEngineOwned, "", false};
constexpr EngineFlags kVllm{"vLLM", "--model", "--host", "--port", "", kVllmOwned, "serve", true};
constexpr EngineFlags kSglang{"SGLang", "--model-path", "--host", "--port", "", kSglangOwned, "", true};
constexpr EngineFlags kLlamaServer{"llama.cpp's server", "--model", "--host", "--port", "", kLlamaServerOwned, "", false};

// What the recipe says instead of an owned flag.
std::string_view instead(std::string_view flag) {
    if (flag == "--host" || flag == "--port" || flag == "--uds") return "anvil allocates the engine's address";
    if (flag == "--served-model-name") return "name it in /serving/served_model_name";
    if (flag == "--api-key" || flag == "--api-key-file") return "anvil makes each engine's key";
    if (flag == "--device") return "anvil places the engine (a GPU recipe runs on the GPUs anvil gives it)";
    if (flag.starts_with("--draft-")) return "describe the draft in /launch/draft";
    return "give the model in /launch/model (pinned, inside an allowed root)";
}

// The engine a recipe's name says (a document whose arguments run another is invalid already).
const EngineFlags* known_engine(const std::string& engine_name) {
    const std::string name = normalize_engine(engine_name);
    if (name == "anvil-engine") return &kAnvilEngine;
    if (name == "vllm") return &kVllm;
    if (name == "sglang") return &kSglang;
    if (name == "llama.cpp") return &kLlamaServer;
    return nullptr;
}

}  // namespace

bool names_flag(std::string_view argument, std::string_view flag, bool argparse) {
    if (argument == flag || (argument.size() > flag.size() && argument.starts_with(flag) && argument[flag.size()] == '=')) return true;
    if (!argparse || !argument.starts_with("--")) return false;
    std::string name(argument.substr(0, argument.find('=')));
    std::replace(name.begin(), name.end(), '_', '-');
    // argparse takes any unambiguous prefix of a long flag for it: four characters and more count
    // here ("--mo" for "--model"), so that "--" and one-letter stubs stay out of it.
    return name == flag || (name.size() >= 4 && flag.starts_with(name));
}

std::optional<EngineFlags> engine_flags(const Recipe& recipe) {
    if (recipe.launch.kind == "embedded") return kAnvilEngine;
    if (recipe.launch.kind != "native") return std::nullopt;
    if (const EngineFlags* known = known_engine(recipe.engine_name)) return *known;
    return std::nullopt;
}

std::optional<std::string> owned_flag_refusal(const Recipe& recipe) {
    const auto flags = engine_flags(recipe);
    if (!flags) return std::nullopt;
    const auto& arguments = recipe.launch.arguments;
    for (std::size_t i = 0; i < arguments.size(); ++i) {
        const std::string at = "/launch/arguments/" + std::to_string(i);
        for (std::string_view flag : flags->owned)
            if (names_flag(arguments[i], flag, flags->argparse))
                return "launch.arguments at " + at + ": " + std::string(flag) + " is a flag anvil gives " + std::string(flags->engine) +
                       " itself; remove it: " + std::string(instead(flag));
        if (!flags->model_after.empty() && arguments[i] == flags->model_after && i + 1 < arguments.size() &&
            !arguments[i + 1].starts_with("-"))
            return "launch.arguments at /launch/arguments/" + std::to_string(i + 1) + ": '" + arguments[i + 1] + "' after '" +
                   std::string(flags->model_after) + "' names the model, which anvil gives " + std::string(flags->engine) +
                   " itself; remove it: " + std::string(instead("--model"));
    }
    if (recipe.launch.kind == "native" && !recipe.launch.model)
        return "launch.model at /launch/model: a native " + std::string(flags->engine) +
               " launch gets its model from anvil; add /launch/model (pinned, inside an allowed root)";
    return std::nullopt;
}

}  // namespace anvil::registry
