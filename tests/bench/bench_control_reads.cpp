// Control-plane reads under slow work (issue 17): do GET /readyz, /metrics and /api/v1/status stay
// responsive while the reconcile loop is busy with something slow? Two daemons; each slow phase is
// set against the idle baseline of the same daemon in the same run:
//   idle       the daemon serving a default, its passes running every second, nothing slow;
//   slow fetch a second registry source behind an HTTP server on loopback that answers every ref
//              advertisement only after a delay (a real `git http-backend` behind it), with a
//              registry sync forced through the API twice a second, so libgit2's fetch keeps
//              blocking a pass for seconds;
//   pin drain  a streaming chat request held in flight through the stable endpoint (its engine
//              stopped with SIGSTOP before it was sent, resumed after the hold) while a pin
//              through the API switches the default, so the switch waits on the drain;
//   exclusive  the same held stream while the qualification step pauses the default to qualify a
//              candidate that cannot run beside it (two GPU recipes, one declared GPU, inside the
//              exclusive window), so the pause waits on the drain. The embedded engine computes on
//              the CPU whatever a recipe's hardware says, so no GPU is needed (as in the e2e test).
// A probe thread per endpoint sends one request after another on a keep-alive connection; each
// sample belongs to the phase in which it was sent. The bench only talks HTTP to an `anvild`
// process, so it measures whichever anvild it is given (--anvild: an older build, for a before/after).
// It exits 0 whatever the figures are (they are the result); 1 only when a daemon could not be set up.
// Usage: bench_control_reads [--anvild PATH] [--fetch-delay-ms N] [--hold-ms N] [--phase-ms N]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "registry/model_digest.hpp"
#include "test_support.hpp"

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

bool eventually(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
        if (done()) return true;
        std::this_thread::sleep_for(100ms);
    }
    return done();
}

// ---------------------------------------------------------------- the slow git remote

// Runs `git http-backend` as CGI for one request and returns its answer as an HTTP response. The
// environment is built before fork: the bench is multithreaded, so the child only execs.
void git_cgi(const std::string& backend, const fs::path& root, const httplib::Request& req, httplib::Response& res) {
    std::vector<std::string> env = {"GIT_PROJECT_ROOT=" + root.string(),
                                    "GIT_HTTP_EXPORT_ALL=1",
                                    "REQUEST_METHOD=" + req.method,
                                    "PATH_INFO=" + req.path,
                                    "QUERY_STRING=" + (req.has_param("service") ? "service=" + req.get_param_value("service") : std::string()),
                                    "CONTENT_TYPE=" + req.get_header_value("Content-Type"),
                                    "CONTENT_LENGTH=" + std::to_string(req.body.size()),
                                    "REMOTE_ADDR=127.0.0.1",
                                    "SERVER_PROTOCOL=HTTP/1.1",
                                    "GATEWAY_INTERFACE=CGI/1.1",
                                    std::string("PATH=") + (std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin"),
                                    std::string("HOME=") + (std::getenv("HOME") ? std::getenv("HOME") : "/")};
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string path = backend;
    char* argv[] = {path.data(), nullptr};
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) {
        res.status = 500;
        return;
    }
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], STDIN_FILENO);
        dup2(out[1], STDOUT_FILENO);
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        execve(path.c_str(), argv, envp.data());
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    // A fetch's request body (wants and haves) is far below the pipe's capacity: written whole,
    // then the answer read whole.
    for (std::size_t done = 0; done < req.body.size();) {
        const ssize_t n = write(in[1], req.body.data() + done, req.body.size() - done);
        if (n <= 0) break;
        done += static_cast<std::size_t>(n);
    }
    close(in[1]);
    std::string answer;
    char buffer[65536];
    for (ssize_t n; (n = read(out[0], buffer, sizeof buffer)) > 0;) answer.append(buffer, static_cast<std::size_t>(n));
    close(out[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    std::size_t head_end = answer.find("\r\n\r\n");
    std::size_t body_at = head_end + 4;
    if (head_end == std::string::npos) head_end = answer.find("\n\n"), body_at = head_end + 2;
    if (head_end == std::string::npos) {
        res.status = 502;
        return;
    }
    res.status = 200;
    std::string content_type = "application/octet-stream";
    std::size_t at = 0;
    while (at < head_end) {
        std::size_t eol = answer.find('\n', at);
        if (eol == std::string::npos || eol > head_end) eol = head_end;
        std::string line = answer.substr(at, eol - at);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        at = eol + 1;
        const auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        const std::string name = line.substr(0, colon);
        const std::string value = line.substr(line.find_first_not_of(' ', colon + 1));
        if (name == "Status") res.status = std::atoi(value.c_str());
        else if (name == "Content-Type") content_type = value;
        else res.set_header(name, value);
    }
    res.set_content(answer.substr(body_at), content_type);
}

// A git remote over smart HTTP on loopback whose ref advertisement (the first request of every
// fetch) waits `delay_ms` first: libgit2 (1.5 sets no timeout) blocks in the fetch for that long.
class SlowGitRemote {
public:
    SlowGitRemote(std::string backend, fs::path root) : backend_(std::move(backend)), root_(std::move(root)) {
        auto handle = [this](const httplib::Request& req, httplib::Response& res) {
            if (req.path.ends_with("/info/refs")) {
                ++advertisements_;
                if (const int d = delay_ms.load(); d > 0) std::this_thread::sleep_for(std::chrono::milliseconds(d));
            }
            git_cgi(backend_, root_, req, res);
        };
        server_.Get(".*", handle);
        server_.Post(".*", handle);
        port_ = server_.bind_to_any_port("127.0.0.1");
        thread_ = std::thread([this] { server_.listen_after_bind(); });
    }
    ~SlowGitRemote() {
        delay_ms = 0;
        server_.stop();
        thread_.join();
    }
    int port() const { return port_; }
    int advertisements() const { return advertisements_.load(); }
    std::atomic<int> delay_ms{0};

private:
    std::string backend_;
    fs::path root_;
    httplib::Server server_;
    int port_ = 0;
    std::thread thread_;
    std::atomic<int> advertisements_{0};
};

// ---------------------------------------------------------------- anvild

json base_config(const fs::path& dir, const std::string& policy, int first_engine_port) {
    auto assumed = [](int v, const char* unit) { return json{{"value", v}, {"unit", unit}, {"status", "assumed"}, {"source", "bench"}, {"observed_at", "2026-12-01"}}; };
    return {{"sources", json::array()},
            {"data_dir", (dir / "data").string()},
            {"model_root", (dir.parent_path() / "models").string()},
            {"inventory", "none"},
            {"engine_binary", ANVIL_ENGINE},
            // Far from the tests' engine ports (21000-21879) and bench_daemon's (24000-24999).
            {"engine_ports", {{"first", first_engine_port}, {"last", first_engine_port + 39}}},
            {"requirements",
             {{"tokens", {{"prompt", assumed(256, "tokens")}}},
              {"concurrency", assumed(1, "sequences")},
              {"physical_vram_bytes", {{"value", 0}, {"unit", "bytes"}, {"status", "measured"}, {"source", "bench"}, {"observed_at", "2026-12-01"}}},
              {"thresholds", json::object()}}},
            // The drain waits for the held stream; the bench resumes it well before this.
            {"promotion", {{"policy", policy}, {"min_interval_seconds", 0}, {"attempts", 1}, {"drain_timeout_seconds", 60}}},
            {"reconcile_interval_seconds", 1},
            {"stop_engines_on_exit", true}};
}

// anvild as a child process on free loopback ports (it says which in addresses.json), its output
// in a log file: a pipe nobody reads could fill and stall the daemon being measured.
class Anvild {
public:
    Anvild(const std::string& binary, fs::path dir) : dir_(std::move(dir)) {
        fs::remove(dir_ / "data" / "addresses.json");
        process_ = std::make_unique<anvil::test::ChildProcess>(std::vector<std::string>{
            "/bin/sh", "-c", "exec \"$0\" \"$@\" >>\"" + (dir_ / "anvild.log").string() + "\" 2>&1", binary, "--config", (dir_ / "anvild.json").string(),
            "--listen", "127.0.0.1:0", "--serve", "127.0.0.1:0"});
        ok_ = eventually(
            [&] {
                if (!fs::exists(dir_ / "data" / "addresses.json")) return false;
                const json a = json::parse(anvil::test::read_file(dir_ / "data" / "addresses.json"), nullptr, false);
                if (!a.is_object() || a["pid"] != process_->pid()) return false;
                api = port_of(a["api"]), serve = port_of(a["serve"]);
                return true;
            },
            60s);
        ok_ = ok_ && eventually([&] { return get("/readyz").first == 200; }, 120s);
    }
    ~Anvild() {
        process_->kill(SIGTERM);
        process_->wait();
    }
    bool ok() const { return ok_; }
    std::string log_tail() const {
        const std::string log = anvil::test::read_file(dir_ / "anvild.log");
        return log.substr(log.size() > 2000 ? log.size() - 2000 : 0);
    }

    std::pair<int, json> get(const std::string& path) const {
        httplib::Client c("127.0.0.1", api);
        c.set_connection_timeout(2);
        c.set_read_timeout(30);
        auto r = c.Get(path.c_str());
        if (!r) return {0, nullptr};
        return {r->status, json::parse(r->body, nullptr, false)};
    }
    int post(const std::string& path, const json& body) const {
        httplib::Client c("127.0.0.1", api);
        c.set_read_timeout(30);
        std::string token = anvil::test::read_file(dir_ / "data" / "api-token");
        while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
        auto r = c.Post(path.c_str(), {{"Authorization", "Bearer " + token}}, body.dump(), "application/json");
        return r ? r->status : 0;
    }
    std::string status_of(const std::string& id) const {
        auto [code, body] = get("/api/v1/recipes/" + id);
        return code == 200 ? body["data"]["status"].get<std::string>() : "";
    }
    std::string serving() const {
        const json s = get("/api/v1/status").second;
        if (!s.is_object() || !s["endpoint"]["upstream"].is_object()) return "";
        return s["endpoint"]["upstream"]["recipe_id"].get<std::string>();
    }
    // The pid anvild records for the serving engine of `recipe_id` (its keeper, which leads the
    // engine's process group), or 0.
    int serving_pid(const std::string& recipe_id) const {
        const json e = get("/api/v1/engines").second;
        if (!e.is_object()) return 0;
        for (const auto& row : e["data"])
            if (row["role"] == "serving" && row["recipe_id"] == recipe_id && row["pid"].is_number()) return row["pid"].get<int>();
        return 0;
    }
    bool event_says(const std::string& text) const {
        const json events = get("/api/v1/events?limit=1000").second;
        if (!events.is_object()) return false;
        for (const auto& e : events["data"])
            if (e["message"].get<std::string>().find(text) != std::string::npos) return true;
        return false;
    }

    int api = 0, serve = 0;

private:
    static int port_of(const json& address) {
        const std::string a = address.get<std::string>();
        return std::stoi(a.substr(a.rfind(':') + 1));
    }
    fs::path dir_;
    std::unique_ptr<anvil::test::ChildProcess> process_;
    bool ok_ = false;
};

// ---------------------------------------------------------------- the probes

const std::vector<std::string> kEndpoints = {"/readyz", "/metrics", "/api/v1/status"};

struct Sample {
    Clock::time_point sent;
    double ms;
    int status;
};

// One thread per endpoint, each on its own keep-alive connection, one request after another with
// 5 ms between: a stall of one endpoint does not hide the others, and two cores are not saturated.
class Probes {
public:
    explicit Probes(int port) {
        for (std::size_t i = 0; i < kEndpoints.size(); ++i)
            threads_.emplace_back([this, port, i] {
                httplib::Client c("127.0.0.1", port);
                c.set_keep_alive(true);
                c.set_tcp_nodelay(true);
                c.set_read_timeout(60);
                while (!stop_.load()) {
                    const auto t0 = Clock::now();
                    auto r = c.Get(kEndpoints[i].c_str());
                    const Sample s{t0, ms_between(t0, Clock::now()), r ? r->status : 0};
                    {
                        std::lock_guard lock(mutex_);
                        samples_[i].push_back(s);
                    }
                    std::this_thread::sleep_for(5ms);
                }
            });
    }
    ~Probes() { stop(); }
    void stop() {
        stop_ = true;
        for (auto& t : threads_)
            if (t.joinable()) t.join();
    }
    // Latencies of the requests to endpoint `i` sent in [from, to), and how many did not answer 200/503.
    std::vector<double> between(std::size_t i, Clock::time_point from, Clock::time_point to, int& failed) const {
        std::lock_guard lock(mutex_);
        std::vector<double> out;
        for (const auto& s : samples_.at(i))
            if (s.sent >= from && s.sent < to) {
                out.push_back(s.ms);
                // /readyz answers 503 while a source has never been read: an answer, not a failure.
                if (s.status != 200 && s.status != 503) ++failed;
            }
        return out;
    }

private:
    std::vector<std::thread> threads_;
    std::atomic<bool> stop_{false};
    mutable std::mutex mutex_;
    std::map<std::size_t, std::vector<Sample>> samples_;
};

struct Phase {
    std::string name;
    Clock::time_point from, to;
};

struct Stats {
    std::size_t n = 0;
    double p50 = 0, p99 = 0, max = 0;
    int failed = 0;
};

Stats stats_of(std::vector<double> v, int failed) {
    Stats s;
    s.failed = failed;
    s.n = v.size();
    if (v.empty()) return s;
    std::sort(v.begin(), v.end());
    s.p50 = v[v.size() / 2];
    s.p99 = v[std::min(v.size() - 1, v.size() * 99 / 100)];
    s.max = v.back();
    return s;
}

// The table of one daemon's phases (the first is its idle baseline) and, per endpoint, whether the
// worst answer during the slow phases stayed under 10 ms.
void report(const std::string& title, const Probes& probes, const std::vector<Phase>& phases) {
    std::printf("\n%s\n  %-15s %-11s %6s %9s %9s %9s %10s %10s\n", title.c_str(), "endpoint", "phase", "n", "p50 ms", "p99 ms", "max ms", "p99/idle",
                "max/idle");
    for (std::size_t i = 0; i < kEndpoints.size(); ++i) {
        Stats idle;
        double worst_slow = 0;
        std::string worst_phase;
        for (std::size_t p = 0; p < phases.size(); ++p) {
            int failed = 0;
            const Stats s = stats_of(probes.between(i, phases[p].from, phases[p].to, failed), failed);
            if (p == 0) idle = s;
            else if (s.max > worst_slow) worst_slow = s.max, worst_phase = phases[p].name;
            std::printf("  %-15s %-11s %6zu %9.2f %9.2f %9.1f %9.1fx %9.1fx%s\n", kEndpoints[i].c_str(), phases[p].name.c_str(), s.n, s.p50, s.p99, s.max,
                        s.p99 / std::max(idle.p99, 1e-3), s.max / std::max(idle.max, 1e-3),
                        s.failed ? (" (" + std::to_string(s.failed) + " failed)").c_str() : "");
        }
        std::printf("  %-15s max under 10 ms during slow work: %s (worst %.1f ms, %s)\n", kEndpoints[i].c_str(), worst_slow < 10 ? "yes" : "NO", worst_slow,
                    worst_phase.c_str());
    }
}

// ---------------------------------------------------------------- a held stream

// A streaming chat completion through the stable endpoint, held in flight: the engine behind it is
// stopped (SIGSTOP to its process group: the pid anvild reports is the keeper that leads the
// group, the engine its child) before the request is sent, so the endpoint admits and forwards it but no byte
// comes back, and a switch must drain it. (The tiny model streams 400 tokens faster than a stop
// sent on its first byte lands.) release() resumes the engine (SIGCONT) and the stream runs to
// its end. The stop stands in for an engine that takes long to finish what it was sent.
class HeldStream {
public:
    HeldStream(int serve_port, int engine_pid) : pid_(engine_pid) {
        ::kill(-pid_, SIGSTOP);
        thread_ = std::thread([this, serve_port] {
            httplib::Client c("127.0.0.1", serve_port);
            c.set_read_timeout(120);
            // ignore_eos: the random tiny model must not end the stream early.
            const json body = {{"messages", {{{"role", "user"}, {"content", "count slowly"}}}}, {"max_tokens", 400}, {"ignore_eos", true},
                               {"temperature", 0}, {"stream", true}};
            httplib::Request req;
            req.method = "POST";
            req.path = "/v1/chat/completions";
            req.headers = {{"Content-Type", "application/json"}};
            req.body = body.dump();
            req.content_receiver = [this](const char*, std::size_t n, std::uint64_t, std::uint64_t) {
                bytes_ += n;
                return true;
            };
            auto r = c.send(req);
            ok_ = r && r->status == 200 && bytes_.load() > 0;
            done_ = true;
        });
    }
    ~HeldStream() {
        release();
        if (thread_.joinable()) thread_.join();
    }
    // True once the request has had time to reach the stopped engine and is still open.
    bool held() const {
        std::this_thread::sleep_for(500ms);
        return !done_.load() && bytes_.load() == 0;
    }
    void release() {
        if (!released_.exchange(true)) ::kill(-pid_, SIGCONT);
    }
    bool wait_done(std::chrono::milliseconds timeout) const { return eventually([&] { return done_.load(); }, timeout); }
    bool ok() const { return ok_.load(); }
    std::size_t bytes() const { return bytes_.load(); }

private:
    int pid_;
    std::thread thread_;
    std::atomic<bool> released_{false}, done_{false}, ok_{false};
    std::atomic<std::size_t> bytes_{0};
};

// Starts a held stream on the serving engine of `recipe_id`; without one, `why` says what went wrong.
std::unique_ptr<HeldStream> hold_stream(const Anvild& d, const std::string& recipe_id, std::string& why) {
    const int pid = d.serving_pid(recipe_id);
    if (pid <= 0) {
        why = "not measured: no serving engine of " + recipe_id + " in /api/v1/engines: " + d.get("/api/v1/engines").second.dump();
        return nullptr;
    }
    auto s = std::make_unique<HeldStream>(d.serve, pid);
    if (s->held()) return s;
    why = "not measured: the stream ended before the switch (" + std::to_string(s->bytes()) + " bytes)";
    return nullptr;
}

// Local HH:MM, `minutes` from now: exclusive windows are in the machine's local time.
std::string clock_in(int minutes) {
    const std::time_t t = std::time(nullptr) + minutes * 60;
    std::tm local{};
    localtime_r(&t, &local);
    char text[8];
    std::snprintf(text, sizeof text, "%02d:%02d", local.tm_hour, local.tm_min);
    return text;
}

struct Options {
    std::string anvild = ANVILD;
    int fetch_delay_ms = 4000;
    int hold_ms = 6000;
    int phase_ms = 10000;
};

// ---------------------------------------------------------------- daemon A: slow fetch, pin drain

bool bench_fetch_and_pin(const Options& o, const fs::path& root, const std::string& digest, const std::string& backend) {
    const fs::path dir = root / "pin";
    anvil::test::GitRepo local(dir / "registry");
    local.write("recipes/bench-f32.json", anvil::test::embedded_recipe_json("bench-f32", "f32", digest, "cpu"));
    local.write("recipes/bench-q8.json", anvil::test::embedded_recipe_json("bench-q8", "q8", digest, "cpu"));
    local.commit("two CPU recipes");
    // The slow source: any registry will do (here one README); what matters is its fetch.
    anvil::test::GitRepo slow_work(dir / "slow-work");
    slow_work.write("README.md", "a registry behind a slow remote\n");
    slow_work.commit("readme");
    anvil::test::run({"git", "clone", "-q", "--bare", slow_work.dir().string(), (dir / "remotes" / "slow.git").string()});
    SlowGitRemote remote(backend, dir / "remotes");

    // Manual policy: the default moves only when the bench pins.
    json config = base_config(dir, "manual", 47000);
    config["sources"] = {{{"name", "local"}, {"url", local.dir().string()}, {"ref", "main"}, {"poll_interval_seconds", 1}},
                         {{"name", "slow"}, {"url", "http://127.0.0.1:" + std::to_string(remote.port()) + "/slow.git"}, {"ref", "main"}, {"poll_interval_seconds", 1}}};
    anvil::test::write_file(dir / "anvild.json", config.dump(2));
    Anvild d(o.anvild, dir);
    if (!d.ok()) {
        std::printf("setup: anvild did not become ready\n%s\n", d.log_tail().c_str());
        return false;
    }
    if (!eventually([&] { return d.status_of("bench-f32") == "validated" && d.status_of("bench-q8") == "validated"; }, 180s)) {
        std::printf("setup: the two recipes were not validated (%s, %s)\n%s\n", d.status_of("bench-f32").c_str(), d.status_of("bench-q8").c_str(),
                    d.log_tail().c_str());
        return false;
    }
    d.post("/api/v1/default", {{"recipe_id", "bench-f32"}});
    if (!eventually([&] { return d.serving() == "bench-f32"; }, 60s)) {
        std::printf("setup: bench-f32 does not serve\n%s\n", d.log_tail().c_str());
        return false;
    }

    Probes probes(d.api);
    std::vector<Phase> phases;
    auto t = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(o.phase_ms));
    phases.push_back({"idle", t, Clock::now()});

    // Slow fetch: syncs forced twice a second (a separate thread: a POST can stall too).
    const int before = remote.advertisements();
    remote.delay_ms = o.fetch_delay_ms;
    std::atomic<bool> syncing{true};
    std::thread syncer([&] {
        while (syncing.load()) {
            d.post("/api/v1/registry/sync", json::object());
            std::this_thread::sleep_for(500ms);
        }
    });
    t = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(std::max(o.phase_ms, 2 * o.fetch_delay_ms + 1000)));
    phases.push_back({"slow fetch", t, Clock::now()});
    syncing = false;
    syncer.join();
    remote.delay_ms = 0;
    const int slow_fetches = remote.advertisements() - before;
    // Let the fetch in progress finish before the next phase.
    std::this_thread::sleep_for(std::chrono::milliseconds(o.fetch_delay_ms + 2000));

    // Pin drain.
    std::string drain_note;
    if (auto stream = hold_stream(d, "bench-f32", drain_note)) {
        t = Clock::now();
        d.post("/api/v1/default", {{"recipe_id", "bench-q8"}});
        std::this_thread::sleep_for(std::chrono::milliseconds(o.hold_ms));
        const bool still_old = d.serving_pid("bench-f32") > 0;
        stream->release();
        stream->wait_done(60s);
        const bool switched = eventually([&] { return d.serving() == "bench-q8" && d.serving_pid("bench-f32") == 0; }, 60s);
        phases.push_back({"pin drain", t, Clock::now()});
        drain_note = std::string("stream ") + (stream->ok() ? "completed" : "FAILED") + " after the resume (" + std::to_string(stream->bytes()) +
                     " bytes); old engine still running at the resume: " + (still_old ? "yes" : "no") + "; switched to bench-q8: " +
                     (switched ? "yes" : "NO") + "; drained event: " + (d.event_says("drained 1 requests") ? "yes" : "no");
    }
    probes.stop();
    report("daemon A (two CPU recipes; a local source and one behind a slow HTTP remote):", probes, phases);
    std::printf("  slow fetch: each ref advertisement delayed %d ms, %d advertisements during the phase\n", o.fetch_delay_ms, slow_fetches);
    std::printf("  pin drain: stream held %d ms with its engine stopped; %s\n", o.hold_ms, drain_note.c_str());
    return true;
}

// ---------------------------------------------------------------- daemon B: exclusive window

bool bench_exclusive(const Options& o, const fs::path& root, const std::string& digest) {
    const fs::path dir = root / "exclusive";
    anvil::test::GitRepo local(dir / "registry");
    local.write("recipes/gpu-f32.json", anvil::test::embedded_recipe_json("gpu-f32", "f32", digest, "test-gpu"));
    local.commit("f32 on the GPU");
    // One GPU declared, recipes that each want one: a candidate and the default cannot run side by
    // side, and the window is open now, so the qualification step pauses the default.
    json config = base_config(dir, "auto", 47040);
    config["sources"] = {{{"name", "local"}, {"url", local.dir().string()}, {"ref", "main"}, {"poll_interval_seconds", 1}}};
    config["inventory"] = {{"gpus", {{{"uuid", "GPU-00000000-0000-0000-0000-000000000017"}, {"name", "bench GPU"}, {"memory_mib", 81920}, {"idle_used_mib", 0}}}}};
    config["promotion"]["exclusive_window"] = clock_in(-60) + "-" + clock_in(60);
    anvil::test::write_file(dir / "anvild.json", config.dump(2));
    Anvild d(o.anvild, dir);
    if (!d.ok() || !eventually([&] { return d.serving() == "gpu-f32"; }, 180s)) {
        std::printf("setup: gpu-f32 does not serve\n%s\n", d.log_tail().c_str());
        return false;
    }

    Probes probes(d.api);
    std::vector<Phase> phases;
    auto t = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(o.phase_ms));
    phases.push_back({"idle", t, Clock::now()});

    std::string note;
    if (auto stream = hold_stream(d, "gpu-f32", note)) {
        t = Clock::now();
        local.write("recipes/gpu-q8.json", anvil::test::embedded_recipe_json("gpu-q8", "q8", digest, "test-gpu"));
        local.commit("q8 on the GPU");
        d.post("/api/v1/registry/sync", json::object());
        const bool paused = eventually([&] { return d.event_says("paused inside the exclusive window"); }, std::chrono::milliseconds(o.hold_ms));
        std::this_thread::sleep_for(std::chrono::milliseconds(o.hold_ms) - (Clock::now() - t));
        stream->release();
        stream->wait_done(60s);
        const bool back = eventually([&] { return d.event_says("the default serves again") && !d.serving().empty(); }, 120s);
        phases.push_back({"exclusive", t, Clock::now()});
        note = std::string("stream ") + (stream->ok() ? "completed" : "FAILED") + " after the resume; the pause began during the hold: " +
               (paused ? "yes" : "NO") + "; gpu-q8 ended " + d.status_of("gpu-q8") + "; the default serves again: " + (back ? "yes" : "NO");
    }
    probes.stop();
    report("daemon B (two GPU recipes, one declared GPU, inside the exclusive window):", probes, phases);
    std::printf("  exclusive: stream held %d ms with its engine stopped, from the candidate's commit; %s\n", o.hold_ms, note.c_str());
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        if (flag == "--anvild") o.anvild = argv[i + 1];
        else if (flag == "--fetch-delay-ms") o.fetch_delay_ms = std::atoi(argv[i + 1]);
        else if (flag == "--hold-ms") o.hold_ms = std::atoi(argv[i + 1]);
        else if (flag == "--phase-ms") o.phase_ms = std::atoi(argv[i + 1]);
        else {
            std::fprintf(stderr, "usage: bench_control_reads [--anvild PATH] [--fetch-delay-ms N] [--hold-ms N] [--phase-ms N]\n");
            return 2;
        }
    }
    if (!std::getenv("ANVIL_LOG")) setenv("ANVIL_LOG", "warn", 1);
    const auto exec_path = anvil::test::run({"git", "--exec-path"});
    std::string backend = exec_path.output.substr(0, exec_path.output.find('\n')) + "/git-http-backend";
    if (exec_path.exit_code != 0 || access(backend.c_str(), X_OK) != 0) {
        std::printf("bench_control_reads: git http-backend not found (%s); nothing measured\n", backend.c_str());
        return 0;
    }
    anvil::test::TempDir root;
    auto made = anvil::test::run({ANVIL_ENGINE, "make-model", "--out", (root / "models" / "tiny").string(), "--preset", "tiny", "--seed", "3"});
    if (made.exit_code != 0) {
        std::printf("setup: make-model failed: %s\n", made.output.c_str());
        return 1;
    }
    const std::string digest = anvil::registry::model_digest(root / "models" / "tiny");
    std::printf("bench_control_reads: anvild %s; fetch delay %d ms, stream held %d ms, phases %d ms; load average %s\n", o.anvild.c_str(), o.fetch_delay_ms,
                o.hold_ms, o.phase_ms, anvil::test::read_file("/proc/loadavg").substr(0, 14).c_str());
    const bool a = bench_fetch_and_pin(o, root.path(), digest, backend);
    const bool b = bench_exclusive(o, root.path(), digest);
    return a && b ? 0 : 1;
}
