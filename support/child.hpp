// Running a child to completion or to a deadline, whichever comes first: argv without a shell, an
// exact environment (or this process's), stdout and stderr captured (stderr keeps its last
// `stderr_cap` bytes). The child leads its own process group, and at the deadline the whole group
// gets SIGKILL, so a hung helper and anything it started are gone when this returns. The one
// runner of short children: the container runtime's CLI (daemon/drivers) and the collective probe
// (kernels/hardware) both run through it.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace anvil::support {

struct ChildResult {
    int exit_code = -1;          // or 128 + signal
    bool timed_out = false;      // killed at the deadline
    bool exec_failed = false;    // argv[0] could not be executed; `err` says why
    std::string out;
    std::string err;             // the tail, when longer than the cap
    double seconds = 0;
    bool ok() const { return exit_code == 0 && !timed_out && !exec_failed; }
};

// What becomes of the child's process group once the child itself has exited: ended (a probe's
// stray helpers go with it), or left (a container runtime's CLI leaves the container's monitor
// behind on purpose).
enum class GroupAfterExit { end, leave };

// argv[0] must be a path (no PATH lookup). `environment` replaces the child's when given; without
// it the child inherits this process's. A zero `deadline` waits for as long as the child runs; at
// the deadline the group is killed whatever `after_exit` says. Throws std::runtime_error only when
// no child can be made (pipe, fork); a child that cannot exec is exec_failed.
ChildResult run_child(const std::vector<std::string>& argv, const std::optional<std::map<std::string, std::string>>& environment,
                      std::chrono::milliseconds deadline, std::size_t stderr_cap = 1u << 20,
                      GroupAfterExit after_exit = GroupAfterExit::end);

// This process's environment as a map, for a child's environment to start from.
std::map<std::string, std::string> current_environment();

}  // namespace anvil::support
