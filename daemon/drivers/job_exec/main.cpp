// anvil-job-exec: what a Slurm job of anvild's runs on its node. It execs the command anvild put in
// ANVIL_JOB_ARGV (a JSON array of strings) exactly as given, so the batch script needs no arguments
// and no recipe string is parsed by a shell (slurmrestd 22.05 cannot take a job's argv: it crashes).
// Two things only the node knows are added here: the GPUs Slurm gave the job, as a container
// runtime's --device flags at ANVIL_JOB_GPU_DEVICES_AT, and HOME (from the user's entry, when the
// job's environment has none) for a runtime that keeps its storage there. With ANVIL_JOB_STOP_ARGV
// (a container's), it stays as the command's parent instead of exec'ing it, and runs that command
// when Slurm signals the job to end, since the runtime's own process does not stop the container.
#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

volatile sig_atomic_t ending = 0;
void on_end(int) { ending = 1; }

// A JSON array of strings from the environment variable `name`, or nothing (and `bad` set).
std::optional<std::vector<std::string>> words_of(const char* name, bool& bad) {
    const char* text = std::getenv(name);
    if (!text) return std::nullopt;
    const nlohmann::json argv = nlohmann::json::parse(text, nullptr, false);
    if (!argv.is_array() || argv.empty() || !std::all_of(argv.begin(), argv.end(), [](const auto& a) { return a.is_string(); })) {
        bad = true;
        return std::nullopt;
    }
    std::vector<std::string> words;
    for (const auto& a : argv) words.push_back(a.get<std::string>());
    return words;
}

pid_t spawn(std::vector<std::string> words, const sigset_t& original_mask) {
    const pid_t pid = fork();
    if (pid != 0) return pid;
    sigprocmask(SIG_SETMASK, &original_mask, nullptr);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    std::vector<char*> pointers;
    for (auto& w : words) pointers.push_back(w.data());
    pointers.push_back(nullptr);
    execvp(pointers[0], pointers.data());
    std::cerr << "anvil-job-exec: cannot run " << words[0] << ": " << std::strerror(errno) << "\n";
    _exit(errno == ENOENT ? 127 : 126);
}

int status_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

void on_child(int) {}

// Runs `command` as a child; on SIGTERM or SIGINT runs `stop` once (also when the command has
// already died of the same signal: Slurm signals every process of the job) and waits for the
// command, whose exit status becomes this process's.
int supervise(const std::vector<std::string>& command, const std::vector<std::string>& stop) {
    sigset_t watched, original;
    sigemptyset(&watched);
    for (int s : {SIGTERM, SIGINT, SIGCHLD}) sigaddset(&watched, s);
    struct sigaction action {};
    sigemptyset(&action.sa_mask);
    action.sa_handler = on_end;
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGINT, &action, nullptr);
    action.sa_handler = on_child;  // ignored by default, SIGCHLD would not end sigsuspend
    sigaction(SIGCHLD, &action, nullptr);
    sigprocmask(SIG_BLOCK, &watched, &original);
    const pid_t child = spawn(command, original);
    if (child < 0) {
        std::cerr << "anvil-job-exec: fork: " << std::strerror(errno) << "\n";
        return 126;
    }
    bool stopped = false;
    for (;;) {
        int status = 0;
        const pid_t done = waitpid(child, &status, WNOHANG);
        if (ending && !stopped) {
            stopped = true;
            std::cerr << "anvil-job-exec: the job is ending: " << stop.front() << " stop\n";
            int stop_status = 0;
            if (const pid_t s = spawn(stop, original); s > 0) waitpid(s, &stop_status, 0);
        }
        if (done == child) return status_code(status);
        if (done < 0) return 126;
        sigsuspend(&original);  // the signals are let in only here: none is missed
    }
}

int refuse(const std::string& why) {
    std::cerr << "anvil-job-exec: " << why << "\n";
    return 2;
}

// The job's GPU indices as slurmd sets them: SLURM_JOB_GPUS, else CUDA_VISIBLE_DEVICES ("0,2").
std::vector<std::string> job_gpus() {
    const char* list = std::getenv("SLURM_JOB_GPUS");
    if (!list || !*list) list = std::getenv("CUDA_VISIBLE_DEVICES");
    std::vector<std::string> out;
    std::istringstream in(list ? list : "");
    for (std::string one; std::getline(in, one, ',');)
        if (!one.empty()) out.push_back(one);
    return out;
}

}  // namespace

int main() {
    bool bad = false;
    const auto command = words_of("ANVIL_JOB_ARGV", bad);
    if (bad) return refuse("ANVIL_JOB_ARGV is not a JSON array of strings");
    if (!command) return refuse("ANVIL_JOB_ARGV is not set (anvild sets it on the jobs it submits)");
    std::vector<std::string> words = *command;
    const auto stop = words_of("ANVIL_JOB_STOP_ARGV", bad);
    if (bad) return refuse("ANVIL_JOB_STOP_ARGV is not a JSON array of strings");

    if (const char* at = std::getenv("ANVIL_JOB_GPU_DEVICES_AT")) {
        char* end = nullptr;
        const unsigned long position = std::strtoul(at, &end, 10);
        if (!*at || *end || position == 0 || position >= words.size())
            return refuse(std::string("ANVIL_JOB_GPU_DEVICES_AT is not a position inside the command: ") + at);
        const auto gpus = job_gpus();
        if (gpus.empty()) return refuse("the job asked for GPUs, but Slurm gave it none (SLURM_JOB_GPUS and CUDA_VISIBLE_DEVICES are unset)");
        std::vector<std::string> devices;
        for (const auto& g : gpus) devices.push_back("--device=nvidia.com/gpu=" + g);
        words.insert(words.begin() + static_cast<std::ptrdiff_t>(position), devices.begin(), devices.end());
        unsetenv("ANVIL_JOB_GPU_DEVICES_AT");
    }
    if (!std::getenv("HOME"))
        if (const passwd* user = getpwuid(getuid()); user && user->pw_dir) setenv("HOME", user->pw_dir, 1);

    // The engine need not see how it was started.
    unsetenv("ANVIL_JOB_ARGV");
    unsetenv("ANVIL_JOB_STOP_ARGV");
    if (stop) return supervise(words, *stop);
    std::vector<char*> pointers;
    for (auto& w : words) pointers.push_back(w.data());
    pointers.push_back(nullptr);
    execvp(pointers[0], pointers.data());
    std::cerr << "anvil-job-exec: cannot run " << words[0] << ": " << std::strerror(errno) << "\n";
    return errno == ENOENT ? 127 : 126;
}
