#include "daemon/drivers/process_spawn.hpp"
#include "support/fd.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "daemon/drivers/driver.hpp"

namespace anvil::drivers {

namespace {

// Everything the forked keeper needs, prepared before fork: after fork in a threaded process only
// async-signal-safe calls are allowed, so no allocation happens there.
struct KeeperArgs {
    const char* exe;
    char* const* argv;
    char* const* envp;
    const char* log;
    const char* log_old;
    const char* exit_file;
    std::size_t cap;
    int go_fd;   // the driver writes one byte once the keeper is recorded
    int err_fd;  // errno of a failed execve; closed on success (O_CLOEXEC)
};

// The keeper points 0, 1 and 2 at /dev/null, so the descriptors it keeps must lie above them (they
// may not when this process was started with stdin or stdout closed).
int above_stdio(int fd) {
    if (fd > 2) return fd;
    const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    ::close(fd);
    return moved;
}

void close_all_but(int a, int b) {
    if (a > b) std::swap(a, b);
    // close_range with lo > hi fails with EINVAL, which is harmless here.
    ::close_range(3, unsigned(a) - 1, 0);
    ::close_range(unsigned(a) + 1, unsigned(b) - 1, 0);
    ::close_range(unsigned(b) + 1, ~0u, 0);
}

[[noreturn]] void run_keeper(const KeeperArgs& k) {
    ::setsid();
    // The keeper must outlive the engine's SIGTERM to record how it exited; SIGKILL still ends it.
    ::signal(SIGTERM, SIG_IGN);
    ::signal(SIGINT, SIG_IGN);
    ::signal(SIGHUP, SIG_IGN);
    ::signal(SIGPIPE, SIG_IGN);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    close_all_but(k.go_fd, k.err_fd);
    const int devnull = ::open("/dev/null", O_RDWR);
    ::dup2(devnull, 0);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    if (devnull > 2) ::close(devnull);

    char go = 0;
    ssize_t got;
    do got = ::read(k.go_fd, &go, 1);
    while (got < 0 && errno == EINTR);
    if (got != 1) ::_exit(125);  // the driver died before recording this engine: never start it
    ::close(k.go_fd);

    int log = ::open(k.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int out[2];
    if (log < 0 || ::pipe2(out, O_CLOEXEC) != 0) {
        const int e = errno;
        support::write_all(k.err_fd, std::string_view(reinterpret_cast<const char*>(&e), sizeof e));
        ::_exit(126);
    }
    const pid_t engine = ::fork();
    if (engine == 0) {
        ::dup2(out[1], 1);
        ::dup2(out[1], 2);
        for (int s : {SIGTERM, SIGINT, SIGHUP, SIGPIPE}) ::signal(s, SIG_DFL);
        ::execve(k.exe, k.argv, k.envp);
        const int e = errno;
        support::write_all(k.err_fd, std::string_view(reinterpret_cast<const char*>(&e), sizeof e));
        ::_exit(127);
    }
    if (engine < 0) {
        const int e = errno;
        support::write_all(k.err_fd, std::string_view(reinterpret_cast<const char*>(&e), sizeof e));
        ::_exit(126);
    }
    ::close(out[1]);
    ::close(k.err_fd);

    struct stat st {};
    std::size_t size = ::fstat(log, &st) == 0 ? std::size_t(st.st_size) : 0;
    static char buffer[1 << 16];
    int status = 0;
    bool exited = false;
    for (;;) {
        pollfd p{out[0], POLLIN, 0};
        const int ready = ::poll(&p, 1, 200);
        ssize_t n = 0;
        if (ready > 0) {
            n = ::read(out[0], buffer, sizeof buffer);
            if (n < 0 && errno == EINTR) continue;
        }
        if (n > 0) {
            const char* data = buffer;
            std::size_t len = std::size_t(n);
            if (len > k.cap) {  // a chunk larger than a whole part: keep its end
                data += len - k.cap;
                len = k.cap;
            }
            if (size + len > k.cap && size > 0) {
                ::close(log);
                ::rename(k.log, k.log_old);
                log = ::open(k.log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
                size = 0;
            }
            support::write_all(log, std::string_view(data, len));
            size += len;
            continue;
        }
        if (ready > 0 && n == 0) break;  // every writer closed: the engine and its children are done
        if (ready < 0 && errno != EINTR) break;
        // A descendant may keep the pipe open after the engine exits; the engine's exit decides.
        if (!exited && ::waitpid(engine, &status, WNOHANG) == engine) exited = true;
        if (exited && ready == 0) break;
    }
    if (!exited)
        while (::waitpid(engine, &status, 0) < 0 && errno == EINTR) {
        }
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 255;
    char text[16];
    int len = 0;
    int v = code;
    char digits[16];
    int d = 0;
    do digits[d++] = char('0' + v % 10), v /= 10;
    while (v > 0);
    while (d > 0) text[len++] = digits[--d];
    text[len++] = '\n';
    const int fd = ::open(k.exit_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        support::write_all(fd, std::string_view(text, size_t(len)));
        ::close(fd);
    }
    ::_exit(code);
}

}  // namespace

std::optional<std::string> find_executable(const std::string& name, const std::string& path_list) {
    if (name.empty()) return std::nullopt;
    if (name.find('/') != std::string::npos) return name;
    std::stringstream dirs(path_list);
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
        if (dir.empty()) continue;
        const std::string candidate = dir + "/" + name;
        if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    return std::nullopt;
}

std::optional<ProcStat> read_proc_stat(pid_t pid) {
    if (pid <= 0) return std::nullopt;
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(in, line)) return std::nullopt;
    // The command name is in parentheses and may hold spaces or ')': parse after the last ')'.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) return std::nullopt;
    std::istringstream rest(line.substr(close + 2));
    ProcStat s;
    std::string field;
    rest >> s.state;
    long ppid = 0, pgrp = 0;
    rest >> ppid >> pgrp;
    s.pgid = pid_t(pgrp);
    // Fields 6..21, then 22 is starttime.
    for (int i = 6; i <= 21 && rest >> field; ++i) {
    }
    rest >> s.start_time;
    if (!rest) return std::nullopt;
    return s;
}

bool same_process_alive(pid_t pid, std::uint64_t start_time) {
    const auto s = read_proc_stat(pid);
    return s && s->start_time == start_time && s->state != 'Z' && s->state != 'X';
}

Spawned spawn_supervised(const SpawnPlan& plan, const std::function<void(const Spawned&)>& record) {
    if (plan.argv.empty()) throw EngineError("the launch has no arguments: nothing to execute");
    std::string path_list;
    if (auto it = plan.environment.find("PATH"); it != plan.environment.end()) path_list = it->second;
    else if (const char* p = std::getenv("PATH")) path_list = p;
    const auto exe = find_executable(plan.argv[0], path_list);
    if (!exe) throw EngineError("cannot execute '" + plan.argv[0] + "': not found on PATH (" + path_list + "); give its absolute path");

    std::vector<std::string> env_strings;
    for (const auto& [k, v] : plan.environment) env_strings.push_back(k + "=" + v);
    std::vector<char*> argv, envp;
    for (const auto& a : plan.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    const std::string log = plan.log_path.string(), log_old = log + ".1", exit_file = plan.exit_code_path.string();
    std::error_code ec;
    std::filesystem::remove(plan.exit_code_path, ec);

    int go[2], err[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, go) != 0) throw EngineError(std::string("socketpair: ") + std::strerror(errno));
    if (::pipe2(err, O_CLOEXEC) != 0) {
        ::close(go[0]);
        ::close(go[1]);
        throw EngineError(std::string("pipe: ") + std::strerror(errno));
    }
    go[1] = above_stdio(go[1]);
    err[1] = above_stdio(err[1]);
    const KeeperArgs k{exe->c_str(), argv.data(), envp.data(), log.c_str(), log_old.c_str(), exit_file.c_str(),
                       std::max<std::size_t>(plan.log_cap_bytes, 4096), go[1], err[1]};
    const pid_t pid = ::fork();
    if (pid == 0) run_keeper(k);
    ::close(go[1]);
    ::close(err[1]);
    auto cleanup = [&] {
        ::close(go[0]);
        ::close(err[0]);
    };
    if (pid < 0) {
        cleanup();
        throw EngineError(std::string("fork: ") + std::strerror(errno));
    }
    Spawned s{pid, 0};
    // The keeper's start time is fixed at fork; read it before it can exit.
    if (auto st = read_proc_stat(pid)) s.start_time = st->start_time;
    try {
        record(s);
    } catch (...) {
        cleanup();  // the keeper reads EOF and exits without starting the engine
        ::waitpid(pid, nullptr, 0);
        throw;
    }
    const char byte = 'g';
    ::send(go[0], &byte, 1, MSG_NOSIGNAL);
    int child_errno = 0;
    ssize_t n;
    do n = ::read(err[0], &child_errno, sizeof child_errno);
    while (n < 0 && errno == EINTR);
    cleanup();
    if (n == ssize_t(sizeof child_errno)) {
        ::waitpid(pid, nullptr, 0);
        throw EngineError("cannot execute '" + *exe + "': " + std::strerror(child_errno));
    }
    return s;
}

}  // namespace anvil::drivers
