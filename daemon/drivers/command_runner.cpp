#include "daemon/drivers/command_runner.hpp"

#include <cstdlib>

#include "daemon/drivers/driver.hpp"
#include "daemon/drivers/process_spawn.hpp"
#include "support/child.hpp"

namespace anvil::drivers {

CommandResult run_command(const std::vector<std::string>& argv, const std::optional<std::map<std::string, std::string>>& environment,
                          std::chrono::milliseconds deadline) {
    if (argv.empty()) throw EngineError("run_command: empty argv");
    std::string path_list;
    if (environment && environment->count("PATH")) path_list = environment->at("PATH");
    else if (const char* p = std::getenv("PATH")) path_list = p;
    const auto exe = find_executable(argv[0], path_list);
    if (!exe) throw EngineError("cannot execute '" + argv[0] + "': not found on PATH; install it or configure its path");
    std::vector<std::string> resolved = argv;
    resolved[0] = *exe;
    support::ChildResult child;
    try {
        // The runtime's CLI may leave a container's monitor in its group on purpose: left running.
        child = support::run_child(resolved, environment, deadline, std::size_t(64) << 20, support::GroupAfterExit::leave);
    } catch (const std::runtime_error& e) {
        throw EngineError(e.what());
    }
    CommandResult r;
    r.exit_code = child.exit_code;
    r.out = std::move(child.out);
    r.err = std::move(child.err);
    r.timed_out = child.timed_out;
    if (r.timed_out)
        r.err += (r.err.empty() || r.err.back() == '\n' ? "" : "\n") + argv[0] + " did not finish within " +
                 std::to_string(deadline.count()) + " ms and was killed";
    return r;
}

}  // namespace anvil::drivers
