// Running a child to completion or to a deadline, whichever comes first: argv without a shell, an
// exact environment, stdout and stderr captured (stderr keeps its last `stderr_cap` bytes). The
// child leads its own process group, and at the deadline the whole group gets SIGKILL, so a hung
// probe and anything it started are gone when this returns.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace anvil::hardware {

struct BoundedResult {
    int exit_code = -1;          // or 128 + signal
    bool timed_out = false;      // killed at the deadline
    bool exec_failed = false;    // argv[0] could not be executed; `err` says why
    std::string out;
    std::string err;             // the tail, when longer than the cap
    double seconds = 0;
};

// argv[0] must be a path (no PATH lookup). Throws std::runtime_error only when no child can be made
// (pipe, fork); a child that cannot exec is exec_failed.
BoundedResult run_bounded(const std::vector<std::string>& argv, const std::map<std::string, std::string>& environment,
                          std::chrono::milliseconds deadline, std::size_t stderr_cap = 1u << 20);

// This process's environment as a map, for a child's environment to start from.
std::map<std::string, std::string> current_environment();

}  // namespace anvil::hardware
