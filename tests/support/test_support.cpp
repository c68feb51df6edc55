#include "test_support.hpp"

#include <nlohmann/json.hpp>

#include "registry/document.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace anvil::test {

namespace fs = std::filesystem;

TempDir::TempDir() {
    std::random_device rd;
    const char* base = std::getenv("TMPDIR");
    fs::path root = base && *base ? fs::path(base) : fs::temp_directory_path();
    for (int attempt = 0; attempt < 100; ++attempt) {
        fs::path candidate = root / ("anvil-test-" + std::to_string(rd()));
        if (fs::create_directory(candidate)) {
            path_ = candidate;
            return;
        }
    }
    throw std::runtime_error("cannot create a temporary directory under " + root.string());
}

TempDir::~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
}

std::string trimmed(std::string s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    return s;
}

std::string all_errors(const registry::Document& doc) {
    std::string out;
    for (const auto& line : doc.error_lines()) out += line + "\n";
    return out;
}

std::string read_file(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + file.string());
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
}

void write_file(const fs::path& file, const std::string& content) {
    if (file.has_parent_path()) fs::create_directories(file.parent_path());
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << content;
    if (!out) throw std::runtime_error("cannot write " + file.string());
}

ProcessResult run(const std::vector<std::string>& argv, const fs::path& cwd) {
    int pipefd[2];
    if (pipe(pipefd) != 0) throw std::runtime_error("pipe failed");
    pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
        dup2(pipefd[1], STDOUT_FILENO);
        dup2(pipefd[1], STDERR_FILENO);
        close(pipefd[0]);
        close(pipefd[1]);
        if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
        std::vector<char*> args;
        for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        execvp(args[0], args.data());
        _exit(127);
    }
    close(pipefd[1]);
    ProcessResult result;
    char buffer[4096];
    ssize_t n;
    while ((n = read(pipefd[0], buffer, sizeof buffer)) > 0) result.output.append(buffer, static_cast<std::size_t>(n));
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return result;
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv) {
    int pipefd[2];
    if (pipe(pipefd) != 0) throw std::runtime_error("pipe failed");
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
        // A test that crashes (a sanitizer's abort) runs no destructor: the child must not outlive
        // it, holding ctest's output pipe open until ctest's timeout.
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        dup2(pipefd[1], STDOUT_FILENO);
        close(pipefd[0]);
        close(pipefd[1]);
        std::vector<char*> args;
        for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        execvp(args[0], args.data());
        _exit(127);
    }
    close(pipefd[1]);
    fd_ = pipefd[0];
}

ChildProcess::~ChildProcess() {
    if (!reaped_) {
        ::kill(pid_, SIGKILL);
        wait();
    }
    if (fd_ >= 0) close(fd_);
}

bool ChildProcess::read_line(std::string& line, int timeout_ms) {
    for (;;) {
        auto newline = buffer_.find('\n');
        if (newline != std::string::npos) {
            line = buffer_.substr(0, newline);
            buffer_.erase(0, newline + 1);
            return true;
        }
        pollfd p{fd_, POLLIN, 0};
        if (poll(&p, 1, timeout_ms) <= 0) return false;
        char chunk[4096];
        ssize_t n = read(fd_, chunk, sizeof chunk);
        if (n <= 0) return false;
        buffer_.append(chunk, static_cast<std::size_t>(n));
    }
}

void ChildProcess::kill(int signal) {
    if (!reaped_) ::kill(pid_, signal);
}

int ChildProcess::wait() {
    if (!reaped_) {
        waitpid(pid_, &status_, 0);
        reaped_ = true;
    }
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
}

GitRepo::GitRepo(fs::path dir, const std::string& branch) : dir_(std::move(dir)) {
    fs::create_directories(dir_);
    git({"init", "-q", "-b", branch});
    git({"config", "user.name", "anvil tests"});
    git({"config", "user.email", "tests@anvil.invalid"});
    git({"config", "commit.gpgsign", "false"});
}

void GitRepo::write(const std::string& relative, const std::string& content) { write_file(dir_ / relative, content); }

void GitRepo::git(const std::vector<std::string>& args) {
    std::vector<std::string> argv{"git"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto result = run(argv, dir_);
    if (result.exit_code != 0) throw std::runtime_error("git failed: " + result.output);
}

std::string GitRepo::commit(const std::string& message) {
    git({"add", "-A"});
    git({"commit", "-q", "--allow-empty", "-m", message});
    return head();
}

std::string GitRepo::head() {
    auto result = run({"git", "rev-parse", "HEAD"}, dir_);
    if (result.exit_code != 0) throw std::runtime_error("git rev-parse failed: " + result.output);
    return result.output.substr(0, 40);
}

std::string seed_path(const std::string& prefix) {
    for (const auto& entry : fs::directory_iterator(ANVIL_SEEDS_DIR)) {
        if (entry.path().filename().string().starts_with(prefix)) return entry.path().string();
    }
    throw std::runtime_error("no seed starting with " + prefix + " in " + std::string(ANVIL_SEEDS_DIR));
}

std::string seed_text(const std::string& prefix) { return read_file(seed_path(prefix)); }

std::filesystem::path engine_rootfs_tar(const std::filesystem::path& dir, const std::filesystem::path& engine, std::string& why) {
    namespace fs = std::filesystem;
    const fs::path root = dir / "rootfs";
    fs::create_directories(root / "bin");
    fs::copy_file(engine, root / "bin/anvil-engine", fs::copy_options::overwrite_existing);
    const auto ldd = run({"ldd", engine.string()});
    std::istringstream lines(ldd.output);
    std::string word;
    while (lines >> word) {
        if (!word.starts_with("/") || !fs::exists(word)) continue;
        fs::create_directories((root / word.substr(1)).parent_path());
        fs::copy_file(fs::canonical(word), root / word.substr(1), fs::copy_options::overwrite_existing);
    }
    const fs::path tar = dir / "rootfs.tar";
    if (const auto made = run({"tar", "-C", root.string(), "-cf", tar.string(), "."}); made.exit_code != 0) {
        why = "tar failed: " + made.output;
        return {};
    }
    return tar;
}

std::string embedded_recipe_json(const std::string& id, const std::string& weights, const std::string& digest,
                                 const std::string& hardware_id) {
    using json = nlohmann::json;
    json r = {{"schema_version", "anvil.recipe/v1"},
              {"id", id},
              {"recipe_source", "test"},
              {"status", "candidate"},
              {"description", "test recipe " + id},
              {"model_instance_id", "tiny"},
              {"hardware_id", hardware_id},
              {"hardware_count", 1},
              {"engine", {{"name", "anvil-engine"}, {"version", "0.1.0"}, {"graph_mode", nullptr}}},
              {"launch",
               {{"kind", "embedded"},
                {"model", {{"path", "${MODEL_ROOT}/tiny"}, {"digest", digest}, {"dtype", "f32"}, {"licence", "MIT"}}},
                {"arguments", {"--weights", weights, "--max-context", "512", "--max-seqs", "4"}},
                {"environment", json::object()}}},
              {"serving", {{"served_model_name", "tiny-" + weights}, {"max_context_tokens", 512}, {"max_concurrency", 4}, {"tensor_parallel", 1}}},
              {"capabilities", {{"chat", true}, {"reasoning", false}, {"tools", false}, {"vision", false}}},
              {"speed_sweep_ids", json::array()}};
    return r.dump(2);
}

}  // namespace anvil::test
