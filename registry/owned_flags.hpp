// The flags anvil gives an engine itself, which a recipe's arguments may not name in any spelling
// ("--x v", "--x=v", repeated). anvil-engine keeps the last value of nothing: it refuses a repeated
// flag; other engines keep the last or the first, so a recipe's "--model /elsewhere" next to the
// driver's would serve an unpinned model from outside the allowed roots. The model comes from
// launch.model (pinned, inside an allowed root), the address from the port anvil allocates, the
// key from anvil, the served name from serving.served_model_name, the GPUs from anvil's placement,
// and an embedded draft from launch.draft.
//
// Which launches: embedded ones (anvil-engine's flags) and native ones of the engines anvil knows
// by name (vLLM, SGLang, llama.cpp's server, anvil-engine), to which resolve_launch then appends
// the owned flags itself. A container's arguments name paths and addresses inside its own image
// and network namespace; anvil owns only the published port there, so they are not judged here.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "registry/recipe.hpp"

namespace anvil::registry {

// How an engine takes what anvil owns: the flag for the model, host and port (empty where
// anvil does not give it), and every spelling a recipe may not use.
struct EngineFlags {
    std::string_view engine;  // as messages name it
    std::string_view model_flag;
    std::string_view host_flag;
    std::string_view port_flag;
    std::string_view served_name_flag;  // where the engine is named by anvil (anvil-engine), or empty
    std::span<const std::string_view> owned;
    // A subcommand after which a bare word is the model (vLLM's "serve MODEL"), or empty; anvil
    // gives the model there, so that a second bare word is an error to the engine.
    std::string_view model_after;
    // Python's argparse reads the flags: "--api_key" is "--api-key" to vLLM, and a prefix such as
    // "--mod" is "--model" when no other flag starts so; both count as the owned flag.
    bool argparse = false;
};

// The flags anvil owns for `recipe`'s launch, or nothing where it owns none (containers, engines
// it does not know by name).
std::optional<EngineFlags> engine_flags(const Recipe& recipe);

// Whether `argument` names `flag`: "--x", or "--x=value"; for an argparse engine also "--x_y" for
// "--x-y" and an unambiguous prefix ("--mod" for "--model").
bool names_flag(std::string_view argument, std::string_view flag, bool argparse = false);

// The first argument that names a flag anvil owns, as one line naming its JSON pointer
// (/launch/arguments/N) and what to write instead; or nothing.
std::optional<std::string> owned_flag_refusal(const Recipe& recipe);

}  // namespace anvil::registry
