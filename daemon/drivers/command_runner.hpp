// Running a short helper command (a container runtime's CLI) to completion or to a deadline: argv
// without a shell, an exact environment, stdout and stderr captured. The command leads its own
// process group, so at the deadline it and whatever it started in that group are killed.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace anvil::drivers {

struct CommandResult {
    int exit_code = -1;  // or 128 + signal
    std::string out;
    std::string err;             // ends with a line saying so when the deadline killed the command
    bool timed_out = false;
    bool ok() const { return exit_code == 0; }
};

// `environment` replaces the child's environment when set; otherwise it inherits this process's.
// A zero `deadline` waits for as long as the command runs.
CommandResult run_command(const std::vector<std::string>& argv,
                          const std::optional<std::map<std::string, std::string>>& environment = std::nullopt,
                          std::chrono::milliseconds deadline = std::chrono::milliseconds(0));

}  // namespace anvil::drivers
