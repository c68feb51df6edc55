#include "support/child.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace anvil::support {

namespace {

using Clock = std::chrono::steady_clock;

void keep_tail(std::string& s, std::size_t cap) {
    if (s.size() > cap) s.erase(0, s.size() - cap);
}

}  // namespace

std::map<std::string, std::string> current_environment() {
    std::map<std::string, std::string> env;
    for (char** e = environ; e && *e; ++e) {
        const char* eq = std::strchr(*e, '=');
        if (eq) env.emplace(std::string(*e, static_cast<std::size_t>(eq - *e)), std::string(eq + 1));
    }
    return env;
}

ChildResult run_child(const std::vector<std::string>& argv, const std::optional<std::map<std::string, std::string>>& environment,
                      std::chrono::milliseconds deadline, std::size_t stderr_cap, GroupAfterExit after_exit) {
    if (argv.empty()) throw std::runtime_error("run_child: empty argv");
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

    int out[2], err[2], status_pipe[2];
    if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    if (::pipe2(err, O_CLOEXEC) != 0) {
        const int e = errno;
        for (int fd : {out[0], out[1]}) ::close(fd);
        throw std::runtime_error(std::string("pipe: ") + std::strerror(e));
    }
    if (::pipe2(status_pipe, O_CLOEXEC) != 0) {
        const int e = errno;
        for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
        throw std::runtime_error(std::string("pipe: ") + std::strerror(e));
    }
    const auto started = Clock::now();
    const pid_t pid = ::fork();
    if (pid < 0) {
        const int e = errno;
        for (int fd : {out[0], out[1], err[0], err[1], status_pipe[0], status_pipe[1]}) ::close(fd);
        throw std::runtime_error(std::string("fork: ") + std::strerror(e));
    }
    if (pid == 0) {
        ::setpgid(0, 0);
        const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // dup2 onto 0 keeps 0 open across exec
        ::dup2(devnull, 0);
        ::dup2(out[1], 1);
        ::dup2(err[1], 2);
        ::execve(cargv[0], cargv.data(), environment ? envp.data() : environ);
        const int e = errno;
        [[maybe_unused]] const auto n = ::write(status_pipe[1], &e, sizeof e);
        ::_exit(127);
    }
    ::setpgid(pid, pid);  // also here, so the group exists whichever of the two runs first
    ::close(out[1]);
    ::close(err[1]);
    ::close(status_pipe[1]);

    ChildResult r;
    int exec_errno = 0;
    if (::read(status_pipe[0], &exec_errno, sizeof exec_errno) == static_cast<ssize_t>(sizeof exec_errno)) {
        r.exec_failed = true;
        r.err = "cannot execute " + argv[0] + ": " + std::strerror(exec_errno);
    }
    ::close(status_pipe[0]);

    const auto deadline_at = deadline.count() > 0 ? started + deadline : Clock::time_point::max();
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    std::string* sinks[2] = {&r.out, &r.err};
    int open_count = 2;
    char buffer[16384];
    auto grace_until = Clock::time_point::max();
    while (open_count > 0) {
        const auto now = Clock::now();
        if (!r.timed_out && now >= deadline_at) {
            r.timed_out = true;
            ::kill(-pid, SIGKILL);
            // Pipes close when the group is gone; a descendant that left the group could hold them open.
            grace_until = now + std::chrono::seconds(2);
        }
        if (now >= grace_until) break;
        const auto until = r.timed_out ? grace_until : deadline_at;
        const int wait_ms = until == Clock::time_point::max()
                                ? -1
                                : static_cast<int>(std::min<long long>(
                                      std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1, 60'000));
        const int n = ::poll(fds, 2, wait_ms);
        if (n < 0 && errno != EINTR) break;
        for (int i = 0; n > 0 && i < 2; ++i) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            const ssize_t got = ::read(fds[i].fd, buffer, sizeof buffer);
            if (got > 0) {
                sinks[i]->append(buffer, static_cast<std::size_t>(got));
                if (i == 1) keep_tail(r.err, stderr_cap);
            } else if (got == 0 || errno != EINTR) {
                ::close(fds[i].fd);
                fds[i].fd = -1;
                --open_count;
            }
        }
    }
    for (auto& f : fds)
        if (f.fd >= 0) ::close(f.fd);
    // Wait for the child without reaping it: while it is a zombie its pid (the group's id) cannot be
    // reused, so killing the group cannot hit a stranger. Then end whatever it left in its group.
    siginfo_t info{};
    while (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
    }
    if (after_exit == GroupAfterExit::end || r.timed_out) ::kill(-pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.seconds = std::chrono::duration<double>(Clock::now() - started).count();
    return r;
}

}  // namespace anvil::support
