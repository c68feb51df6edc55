// Running a short helper command (a container runtime's CLI) to completion: argv without a shell,
// an exact environment, stdout and stderr captured.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace anvil::driver {

struct CommandResult {
    int exit_code = -1;  // or 128 + signal
    std::string out;
    std::string err;
    bool ok() const { return exit_code == 0; }
};

// `environment` replaces the child's environment when set; otherwise it inherits this process's.
CommandResult run_command(const std::vector<std::string>& argv,
                          const std::optional<std::map<std::string, std::string>>& environment = std::nullopt);

}  // namespace anvil::driver
