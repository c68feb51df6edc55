// For the qualification tests: the real anvil-engine binary as a child process serving the
// make-model small/seed-1 model (the example recipes' model) on a free port of 127.0.0.1.
#pragma once

#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "daemon/qualify/qualification.hpp"
#include "test_support.hpp"

namespace anvil::test::qualify {

// make-model small --seed 1, made once per test process.
inline const std::filesystem::path& small_model() {
    static TempDir dir;
    static const std::filesystem::path model = [] {
        const auto out = dir / "anvil-tiny-llama-small-seed1";
        const auto made = run({ANVIL_ENGINE, "make-model", "--out", out.string(), "--preset", "small", "--seed", "1"});
        if (made.exit_code != 0) throw std::runtime_error("make-model failed: " + made.output);
        return out;
    }();
    return model;
}

// `anvil-engine serve` with the given weights, one thread (the test machine's cores are shared),
// `extra` flags (a draft, say), its output in a log file so that a full pipe can never stall it.
// Stopped with SIGTERM.
class QualifyingEngine {
public:
    explicit QualifyingEngine(const std::string& weights, const std::string& served_name = "anvil-tiny-llama",
                           const std::vector<std::string>& extra = {}) {
        const std::string model = small_model().string();
        log_ = dir_ / "engine.log";
        std::vector<std::string> argv = {ANVIL_ENGINE,     "serve",     "--model", model,     "--host",       "127.0.0.1",
                                         "--port",         "0",         "--weights", weights, "--threads",    "1",
                                         "--max-seqs",     "4",         "--max-context", "1024", "--served-model-name", served_name};
        argv.insert(argv.end(), extra.begin(), extra.end());
        // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
        std::vector<char*> args;
        for (auto& a : argv) args.push_back(a.data());
        args.push_back(nullptr);
        const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) throw std::runtime_error("cannot create " + log_.string());
        pid_ = ::fork();
        if (pid_ < 0) throw std::runtime_error("fork failed");
        if (pid_ == 0) {
            ::dup2(fd, STDOUT_FILENO);
            ::dup2(fd, STDERR_FILENO);
            ::execv(args[0], args.data());
            _exit(127);
        }
        ::close(fd);
        const std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (port_ == 0 && std::chrono::steady_clock::now() < deadline) {
            std::smatch m;
            const std::string text = std::filesystem::exists(log_) ? read_file(log_) : "";
            if (std::regex_search(text, m, listening)) port_ = std::stoi(m[1]);
            else std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        if (port_ == 0) throw std::runtime_error("anvil-engine did not say its port: " + read_file(log_));
        httplib::Client c("127.0.0.1", port_);
        while (std::chrono::steady_clock::now() < deadline) {
            if (auto r = c.Get("/health"); r && r->status == 200) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        throw std::runtime_error("anvil-engine did not become healthy: " + read_file(log_));
    }
    ~QualifyingEngine() {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGTERM);
        for (int i = 0; i < 500; ++i) {
            if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
    }
    QualifyingEngine(const QualifyingEngine&) = delete;
    QualifyingEngine& operator=(const QualifyingEngine&) = delete;

    int port() const { return port_; }
    pid_t pid() const { return pid_; }
    std::string log() const { return read_file(log_); }

    anvil::qualify::Target target(const std::string& recipe, std::int64_t revision) const {
        anvil::qualify::Target t;
        t.port = port_;
        t.model = "anvil-tiny-llama";
        t.recipe_id = recipe;
        t.revision_id = revision;
        t.revision_sha256 = std::string(64, 'a');
        t.commit_id = std::string(40, 'b');
        t.engine_id = "engine-" + std::to_string(revision);
        t.driver = "embedded";
        t.pid = pid_;
        return t;
    }

private:
    TempDir dir_;
    std::filesystem::path log_;
    pid_t pid_ = -1;
    int port_ = 0;
};

// A plan small enough for the shared test machine: a few tokens per request, two attempts.
inline anvil::qualify::Plan quick_plan() {
    anvil::qualify::Plan p;
    p.attempts = 2;
    p.max_tokens = 8;
    p.concurrency = 2;
    p.quality_positions = 4;
    p.top_logprobs = 5;
    p.task_max_tokens = 16;
    p.decode_tokens = 16;
    p.prefill_tokens = 256;
    p.warm_e2e_min_seconds = 0;  // the plan's 3 passes; the healthy-engine test checks the minimum time
    p.request_timeout = std::chrono::seconds(60);
    return p;
}

}  // namespace anvil::test::qualify
