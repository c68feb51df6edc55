#include "engine/supervisor/command_runner.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/supervisor/driver.hpp"
#include "engine/supervisor/process_spawn.hpp"

extern char** environ;

namespace anvil::driver {

CommandResult run_command(const std::vector<std::string>& argv, const std::optional<std::map<std::string, std::string>>& environment,
                          std::chrono::milliseconds deadline) {
    using Clock = std::chrono::steady_clock;
    const auto started = Clock::now();
    if (argv.empty()) throw EngineError("run_command: empty argv");
    std::string path_list;
    if (environment && environment->count("PATH")) path_list = environment->at("PATH");
    else if (const char* p = std::getenv("PATH")) path_list = p;
    const auto exe = find_executable(argv[0], path_list);
    if (!exe) throw EngineError("cannot execute '" + argv[0] + "': not found on PATH; install it or configure its path");
    std::vector<char*> cargv;
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    std::vector<std::string> env_strings;
    std::vector<char*> envp;
    if (environment) {
        for (const auto& [k, v] : *environment) env_strings.push_back(k + "=" + v);
        for (auto& e : env_strings) envp.push_back(e.data());
        envp.push_back(nullptr);
    }
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0) throw EngineError(std::string("pipe: ") + std::strerror(errno));
    if (::pipe2(err, O_CLOEXEC) != 0) {
        ::close(out[0]);
        ::close(out[1]);
        throw EngineError(std::string("pipe: ") + std::strerror(errno));
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::setpgid(0, 0);
        const int devnull = ::open("/dev/null", O_RDONLY);
        ::dup2(devnull, 0);
        ::dup2(out[1], 1);
        ::dup2(err[1], 2);
        ::execve(exe->c_str(), cargv.data(), environment ? envp.data() : environ);
        ::_exit(127);
    }
    if (pid < 0) {
        const int fork_errno = errno;
        for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
        throw EngineError(std::string("fork: ") + std::strerror(fork_errno));
    }
    ::setpgid(pid, pid);  // as the child does: whichever runs first, the group exists before a kill
    ::close(out[1]);
    ::close(err[1]);
    CommandResult r;
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    std::string* sinks[2] = {&r.out, &r.err};
    int open_count = 2;
    char buffer[8192];
    while (open_count > 0) {
        int wait_ms = -1;
        if (deadline.count() > 0) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(started + deadline - Clock::now());
            if (left.count() <= 0) {
                ::kill(-pid, SIGKILL);
                r.timed_out = true;
                break;
            }
            wait_ms = int(std::min<long long>(left.count(), 1000));
        }
        if (::poll(fds, 2, wait_ms) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
            if (n > 0) {
                sinks[i]->append(buffer, size_t(n));
            } else if (n == 0 || errno != EINTR) {
                ::close(fds[i].fd);
                fds[i].fd = -1;
                --open_count;
            }
        }
    }
    for (auto& f : fds)
        if (f.fd >= 0) ::close(f.fd);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r.timed_out)
        r.err += (r.err.empty() || r.err.back() == '\n' ? "" : "\n") + argv[0] + " did not finish within " +
                 std::to_string(deadline.count()) + " ms and was killed";
    return r;
}

}  // namespace anvil::driver
