// Starting a command as a supervised engine process, without a shell. The driver forks a small
// keeper that leads a new session (so the engine's whole process group can be signalled), waits
// until the driver has recorded it, then forks the engine with the exact argv and environment and
// pumps its stdout and stderr into a size-capped log (engine.log, rotated once to engine.log.1).
// The keeper outlives a supervisor killed with SIGKILL, so logs stay capped after adoption, and it
// writes the engine's exit code to a file so a restarted supervisor can still learn it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace anvil::drivers {

struct SpawnPlan {
    std::vector<std::string> argv;                   // argv[0]: a path, or a name looked up on PATH
    std::map<std::string, std::string> environment;  // exactly the engine's environment
    std::filesystem::path log_path;                  // engine.log; engine.log.1 holds the previous part
    std::filesystem::path exit_code_path;            // written by the keeper when the engine exits
    std::size_t log_cap_bytes = 16u << 20;           // each of the two log parts stays under this
};

struct Spawned {
    pid_t pid = -1;                // the keeper: leader of the engine's process group
    std::uint64_t start_time = 0;  // of the keeper, from /proc/<pid>/stat
};

// Forks the keeper, calls `record(spawned)` (which must persist it) before the engine may start,
// and returns once the engine's execve succeeded. Throws EngineError if the command cannot be
// executed (not found, not executable), with the reason.
Spawned spawn_supervised(const SpawnPlan& plan, const std::function<void(const Spawned&)>& record);

// argv[0] as execve needs it: unchanged if it holds a '/', else found on `path_list` (":"-separated).
std::optional<std::string> find_executable(const std::string& name, const std::string& path_list);

struct ProcStat {
    char state = '?';  // R, S, D, Z (zombie), …
    pid_t pgid = -1;
    std::uint64_t start_time = 0;  // clock ticks after boot
};
std::optional<ProcStat> read_proc_stat(pid_t pid);

// True while `pid` is the very process that had `start_time`, and not a zombie.
bool same_process_alive(pid_t pid, std::uint64_t start_time);

}  // namespace anvil::drivers
