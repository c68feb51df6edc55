// The anvil subcommands. Each takes the words after its name and returns the process exit code:
// 0 success, 1 the checked input is bad, 2 the command could not run (usage, unreachable source).
#pragma once

#include <string>
#include <vector>

namespace anvil::cli {

int registry_command(const std::vector<std::string>& args);
int model_command(const std::vector<std::string>& args);
int feasibility_command(const std::vector<std::string>& args);
int gpus_command(const std::vector<std::string>& args);   // gpus_command.cpp
int probe_command(const std::vector<std::string>& args);  // probe_command.cpp
// status, recipes, recipe, history, default, engines, sync, qualify, pin, unpin, freeze, unfreeze:
// requests to a running anvild's REST API (daemon_commands.cpp).
bool is_daemon_command(const std::string& name);
int daemon_command(const std::string& name, const std::vector<std::string>& args);

// Where anvil keeps clones and state when not told: $ANVIL_DATA_DIR, $XDG_STATE_HOME/anvil,
// or ~/.local/state/anvil.
std::string default_data_dir();

}  // namespace anvil::cli
