// anvild's speed (issues 7 and 8), each figure beside a baseline measured in the same run:
//   1. reconcile pass after a one-file commit to a 10,000-recipe registry (target < 50 ms),
//      against the cold pass that read all 10,000;
//   2. GET /api/v1/recipes?status=candidate&limit=100 under load from a second process
//      (targets >= 5,000 requests/s, p99 < 5 ms), against GET /healthz under the same load;
//   3. a new recipe commit until it serves on the stable endpoint, broken into sync + feasibility,
//      waiting, qualification, promotion and switch (the embedded engine, tiny model);
//   4. with that recipe serving: /healthz on both ports and a chat completion through the endpoint
//      while 200 idle and 40 trickling sockets are held against each (target: every answer < 1 s),
//      against the same requests on a quiet daemon.
// Usage: bench_daemon [--serving]   (sections 3 and 4 only)
//        bench_daemon --load HOST PORT PATH SECONDS THREADS   (the load process of section 2)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "daemon/anvild/wiring.hpp"
#include "daemon/config/config.hpp"
#include "daemon/controller/daemon_metrics.hpp"
#include "daemon/controller/reconciler.hpp"
#include "daemon/endpoint/stable_endpoint.hpp"
#include "daemon/drivers/launch_resolution.hpp"
#include "registry/model_digest.hpp"
#include "support/clock.hpp"
#include "state/store.hpp"
#include "test_support.hpp"

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// The load process: THREADS keep-alive clients for SECONDS; prints {requests, errors, p50_ms, p99_ms, rps}.
int load(const std::string& host, int port, const std::string& path, double seconds, int threads) {
    std::vector<std::vector<double>> latencies(static_cast<std::size_t>(threads));
    std::vector<std::size_t> errors(static_cast<std::size_t>(threads));
    const auto start = Clock::now();
    const auto end = start + std::chrono::duration<double>(seconds);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            httplib::Client c(host, port);
            c.set_keep_alive(true);
            c.set_tcp_nodelay(true);
            while (Clock::now() < end) {
                const auto t0 = Clock::now();
                auto r = c.Get(path.c_str());
                if (!r || r->status != 200) ++errors[static_cast<std::size_t>(t)];
                else latencies[static_cast<std::size_t>(t)].push_back(ms_since(t0));
            }
        });
    for (auto& p : pool) p.join();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    std::vector<double> all;
    std::size_t errs = 0;
    for (std::size_t t = 0; t < latencies.size(); ++t) all.insert(all.end(), latencies[t].begin(), latencies[t].end()), errs += errors[t];
    std::sort(all.begin(), all.end());
    auto pct = [&](double p) { return all.empty() ? 0.0 : all[std::min(all.size() - 1, static_cast<std::size_t>(p * all.size()))]; };
    std::cout << json{{"requests", all.size()}, {"errors", errs}, {"p50_ms", pct(0.50)}, {"p99_ms", pct(0.99)}, {"rps", all.size() / elapsed}}.dump() << "\n";
    return 0;
}

// A GPU recipe in the registry's shape, digest-pinned; `n` makes each one distinct.
std::string gpu_recipe(int n) {
    json r = json::parse(anvil::test::read_file(fs::path(ANVIL_EXAMPLES_DIR) / "registry/recipes/glm53-flash-exl3-tr3-4bpw-dflash2-rtxpro6000-vllm-tp2.json"));
    json& data = r.contains("data") ? r["data"] : r;
    char id[64];
    std::snprintf(id, sizeof id, "bench-recipe-%05d", n);
    data["id"] = id;
    data["description"] = std::string("bench recipe ") + id;
    return r.dump(1);
}

void write_config(const fs::path& file, const fs::path& repo, const fs::path& data, const std::string& inventory, const std::string& runtime,
                  const fs::path& models = {}) {
    json config = {{"sources", {{{"name", "bench"}, {"url", repo.string()}, {"ref", "main"}, {"poll_interval_seconds", 1}}}},
                   {"data_dir", data.string()},
                   {"inventory", inventory},
                   {"container_runtime", runtime},
                   {"engine_binary", ANVIL_ENGINE},
                   {"engine_ports", {{"first", 24000}, {"last", 24999}}},
                   {"promotion", {{"policy", "auto"}, {"min_interval_seconds", 0}, {"attempts", 1}}},
                   {"reconcile_interval_seconds", 1},
                   {"stop_engines_on_exit", true}};
    if (!models.empty()) config["model_root"] = models.string();
    anvil::test::write_file(file, config.dump(2));
}

// anvild as a child process on free loopback ports, returned once /readyz answers 200.
struct ChildDaemon {
    int api = 0, serve = 0;
    std::unique_ptr<anvil::test::ChildProcess> process;
    explicit ChildDaemon(const fs::path& config) {
        api = anvil::drivers::allocate_port("127.0.0.1", 18100, 18900);
        serve = anvil::drivers::allocate_port("127.0.0.1", api + 1, 18999);
        process = std::make_unique<anvil::test::ChildProcess>(std::vector<std::string>{
            ANVILD, "--config", config.string(), "--listen", "127.0.0.1:" + std::to_string(api), "--serve", "127.0.0.1:" + std::to_string(serve)});
        httplib::Client c("127.0.0.1", api);
        for (int i = 0; i < 600; ++i) {
            auto r = c.Get("/readyz");
            if (r && r->status == 200) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    }
    void stop() {
        process->kill(SIGTERM);
        process->wait();
    }
};

// ---------------------------------------------------------------- 1. reconcile pass

void bench_pass(const fs::path& dir, anvil::test::GitRepo& repo) {
    write_config(dir / "pass.json", repo.dir(), dir / "pass-data", "auto", "podman");
    auto config = anvil::daemon::load_config(dir / "pass.json");
    config.sources[0].poll_interval = std::chrono::milliseconds(0);  // every pass fetches
    anvil::state::Store store(config.data_dir / "anvil.db");
    anvil::endpoint::StableEndpoint endpoint({});
    anvil::daemon::DaemonMetrics metrics;
    anvil::daemon::ProductionController controller(config, store, endpoint, metrics);
    anvil::daemon::Reconciler& reconciler = controller.reconciler();
    reconciler.start_up();
    auto t = Clock::now();
    reconciler.pass();
    const double cold = ms_since(t);

    std::vector<double> unchanged, incremental;
    json steps;
    for (int i = 0; i < 5; ++i) {
        t = Clock::now();
        reconciler.pass();
        unchanged.push_back(ms_since(t));
    }
    for (int i = 0; i < 10; ++i) {
        repo.write("recipes/bench-recipe-" + std::to_string(10000 + i) + ".json", gpu_recipe(10000 + i));
        repo.commit("one more recipe");
        t = Clock::now();
        reconciler.pass();
        incremental.push_back(ms_since(t));
        steps = reconciler.last_pass()["steps"];
    }
    std::sort(unchanged.begin(), unchanged.end());
    std::sort(incremental.begin(), incremental.end());
    const double median = incremental[incremental.size() / 2];
    std::printf("reconcile pass, 10,000 recipes: cold (read all) %.0f ms; unchanged %.1f ms; after a one-file commit median %.1f ms, worst %.1f ms "
                "(target < 50 ms: %s); cold/incremental = %.0fx\n",
                cold, unchanged[unchanged.size() / 2], median, incremental.back(), median < 50 ? "met" : "NOT met", cold / median);
    std::printf("  the last one-file pass by step (ms): %s\n", steps.dump().c_str());
}

// ---------------------------------------------------------------- 2. API under load

json run_load(int port, const std::string& path, double seconds, int threads) {
    const auto r = anvil::test::run({"/proc/self/exe", "--load", "127.0.0.1", std::to_string(port), path, std::to_string(seconds), std::to_string(threads)});
    const auto line = r.output.substr(0, r.output.find('\n'));
    return json::parse(line, nullptr, false);
}

void bench_api(const fs::path& dir, const anvil::test::GitRepo& repo) {
    // No inventory: the GPU recipes stay unresolved candidates. The container runtime is /bin/false,
    // so a qualification the daemon starts meanwhile fails at once instead of pulling images.
    write_config(dir / "api.json", repo.dir(), dir / "api-data", "none", "/bin/false");
    ChildDaemon daemon(dir / "api.json");
    const int api = daemon.api;
    httplib::Client c("127.0.0.1", api);
    auto page = c.Get("/api/v1/recipes?status=candidate&limit=100");
    const auto total = page ? json::parse(page->body)["meta"]["total"].get<long>() : -1;
    const int threads = 4;
    const json base = run_load(api, "/healthz", 5, threads);
    const json list = run_load(api, "/api/v1/recipes?status=candidate&limit=100", 5, threads);
    daemon.stop();
    if (base.is_discarded() || list.is_discarded()) {
        std::printf("API load: the load process failed\n");
        return;
    }
    std::printf("API, %ld candidates of 10,000, %d keep-alive clients in a second process: GET /recipes?status=candidate&limit=100 "
                "%.0f req/s (target >= 5000: %s), p50 %.2f ms, p99 %.2f ms (target < 5 ms: %s), %ld errors; GET /healthz %.0f req/s, "
                "p99 %.2f ms; list/healthz throughput = %.2f\n",
                total, threads, list["rps"].get<double>(), list["rps"].get<double>() >= 5000 ? "met" : "NOT met", list["p50_ms"].get<double>(),
                list["p99_ms"].get<double>(), list["p99_ms"].get<double>() < 5 ? "met" : "NOT met", list["errors"].get<long>(),
                base["rps"].get<double>(), base["p99_ms"].get<double>(), list["rps"].get<double>() / base["rps"].get<double>());
}

// ---------------------------------------------------------------- 3. commit → serving

// Milliseconds since the epoch of a ledger timestamp; 0 for text that is not one.
double iso_ms(const std::string& iso) {
    const auto t = anvil::support::parse_utc(iso);
    return t ? std::chrono::duration<double, std::milli>(t->time_since_epoch()).count() : 0;
}

// ---------------------------------------------------------------- 4. hostile connections

// Sockets a hostile local process holds open against one port: idle ones that never send, and
// trickling ones that send a header line every 2 s and never finish their head. A trickler the
// server cuts off is opened again, so the pressure lasts.
class HostileSockets {
public:
    HostileSockets(int port, int idle, int trickling) : port_(port) {
        for (int i = 0; i < idle; ++i) idle_.push_back(open(false));
        for (int i = 0; i < trickling; ++i) trickling_.push_back(open(true));
    }
    ~HostileSockets() {
        for (int fd : idle_) ::close(fd);
        for (int fd : trickling_) ::close(fd);
    }
    // Sends each trickler its next line; returns how many had been cut off (and were reopened).
    int trickle() {
        int cut = 0;
        for (int& fd : trickling_) {
            char byte;
            const bool closed = ::recv(fd, &byte, 1, MSG_DONTWAIT) >= 0 || ::send(fd, "X-Slow: 1\r\n", 11, MSG_NOSIGNAL) < 0;
            if (!closed) continue;
            ::close(fd);
            fd = open(true);
            ++cut;
        }
        return cut;
    }

private:
    int open(bool trickle) const {
        const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<std::uint16_t>(port_));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && trickle) ::send(fd, "GET /healthz HTTP/1.1\r\n", 23, MSG_NOSIGNAL);
        return fd;
    }
    int port_;
    std::vector<int> idle_, trickling_;
};

struct Latencies {
    std::vector<double> healthz_api, healthz_endpoint, chat_endpoint;
    int failures = 0;
};

// A new client every 100 ms: GET /healthz on the API, GET /healthz and one short chat completion
// through the stable endpoint, each on a new connection (a hostile socket holds a connection, so a
// new one is what it could starve).
Latencies probe_answers(int api, int serve, double seconds, HostileSockets* hostile_api, HostileSockets* hostile_serve, int& cut) {
    Latencies l;
    const std::string chat = json{{"messages", {{{"role", "user"}, {"content", "hello"}}}}, {"max_tokens", 4}, {"temperature", 0}}.dump();
    const auto end = Clock::now() + std::chrono::duration<double>(seconds);
    auto last_trickle = Clock::now();
    while (Clock::now() < end) {
        if (hostile_api && ms_since(last_trickle) >= 2000) {
            cut += hostile_api->trickle() + hostile_serve->trickle();
            last_trickle = Clock::now();
        }
        auto timed = [&](int port, std::vector<double>& into, bool post) {
            httplib::Client c("127.0.0.1", port);
            c.set_connection_timeout(5, 0);
            c.set_read_timeout(5, 0);
            const auto t0 = Clock::now();
            auto r = post ? c.Post("/v1/chat/completions", chat, "application/json") : c.Get("/healthz");
            if (!r || r->status != 200) ++l.failures;
            else into.push_back(ms_since(t0));
        };
        timed(api, l.healthz_api, false);
        timed(serve, l.healthz_endpoint, false);
        timed(serve, l.chat_endpoint, true);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return l;
}

std::string summary(std::vector<double> v) {
    if (v.empty()) return "no answer";
    std::sort(v.begin(), v.end());
    char text[96];
    std::snprintf(text, sizeof text, "p50 %.2f ms, p99 %.2f ms, max %.2f ms", v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 99 / 100)], v.back());
    return text;
}

double worst(const Latencies& l) {
    double w = 0;
    for (const auto* v : {&l.healthz_api, &l.healthz_endpoint, &l.chat_endpoint})
        for (double x : *v) w = std::max(w, x);
    return w;
}

void bench_hostile_connections(const ChildDaemon& daemon) {
    int cut = 0;
    const Latencies quiet = probe_answers(daemon.api, daemon.serve, 5, nullptr, nullptr, cut);
    HostileSockets api(daemon.api, 200, 40), serve(daemon.serve, 200, 40);
    // 15 s: longer than the 10 s head deadline, so tricklers are cut off and come back meanwhile.
    const Latencies hostile = probe_answers(daemon.api, daemon.serve, 15, &api, &serve, cut);
    std::printf("hostile connections (200 idle + 40 trickling on each of the API and the endpoint), a new client every 100 ms:\n"
                "  quiet:   /healthz API %s; /healthz endpoint %s; chat through the endpoint %s; %d failed\n"
                "  hostile: /healthz API %s; /healthz endpoint %s; chat through the endpoint %s; %d failed; %d tricklers cut off at the head deadline\n"
                "  worst answer under attack %.1f ms (target < 1000 ms: %s); worst hostile/quiet = %.2f\n",
                summary(quiet.healthz_api).c_str(), summary(quiet.healthz_endpoint).c_str(), summary(quiet.chat_endpoint).c_str(), quiet.failures,
                summary(hostile.healthz_api).c_str(), summary(hostile.healthz_endpoint).c_str(), summary(hostile.chat_endpoint).c_str(), hostile.failures,
                cut, worst(hostile), worst(hostile) < 1000 && hostile.failures == 0 ? "met" : "NOT met", worst(hostile) / std::max(worst(quiet), 1e-9));
}

void bench_commit_to_serving(const fs::path& dir) {
    const fs::path models = dir / "models";
    auto made = anvil::test::run({ANVIL_ENGINE, "make-model", "--out", (models / "tiny").string(), "--preset", "tiny", "--seed", "5"});
    if (made.exit_code != 0) return;
    const std::string digest = anvil::registry::model_digest(models / "tiny");
    anvil::test::GitRepo repo(dir / "serving-registry");
    repo.write("README.md", "bench\n");
    repo.commit("empty registry");
    write_config(dir / "serving.json", repo.dir(), dir / "serving-data", "auto", "podman", models);
    ChildDaemon daemon(dir / "serving.json");
    httplib::Client c("127.0.0.1", daemon.api);
    json recipe = json::parse(anvil::test::read_file(fs::path(ANVIL_EXAMPLES_DIR) / "registry/recipes/anvil-tiny-llama-f32-cpu.json"));
    recipe["id"] = "bench-tiny";
    recipe["launch"]["model"]["path"] = "${MODEL_ROOT}/tiny";
    recipe["launch"]["model"]["digest"] = digest;
    recipe["launch"]["arguments"] = {"--weights", "f32", "--max-context", "512"};
    recipe["serving"]["max_context_tokens"] = 512;
    repo.write("recipes/bench-tiny.json", recipe.dump(2));
    repo.commit("a new recipe");
    const auto token = [&] {
        std::string t = anvil::test::read_file(dir / "serving-data" / "api-token");
        while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
        return t;
    }();
    const double committed = static_cast<double>(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
    const auto t0 = Clock::now();
    c.Post("/api/v1/registry/sync", {{"Authorization", "Bearer " + token}}, "{}", "application/json");
    double serving = -1;
    while (ms_since(t0) < 120000) {
        auto r = c.Get("/api/v1/status");
        if (r && r->status == 200) {
            auto s = json::parse(r->body);
            if (s["endpoint"]["upstream"].is_object() && s["endpoint"]["upstream"]["recipe_id"] == "bench-tiny") {
                serving = ms_since(t0);
                break;
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    auto history = json::parse(c.Get("/api/v1/recipes/bench-tiny/history")->body)["data"];
    auto verdicts = json::parse(c.Get("/api/v1/recipes/bench-tiny")->body)["data"]["verdicts"];
    if (serving >= 0) bench_hostile_connections(daemon);
    daemon.stop();
    double candidate = 0, qualifying = 0, validated = 0, promoted = 0, judged = 0;
    for (const auto& t : history) {
        const double at = iso_ms(t["created_at"]) - committed;
        if (t["to"] == "candidate") candidate = at;
        if (t["to"] == "qualifying") qualifying = at;
        if (t["to"] == "validated") validated = at;
        if (t["to"] == "promoted") promoted = at;
    }
    for (const auto& v : verdicts)
        if (v["gate"] == "feasibility") judged = iso_ms(v["created_at"]) - committed;
    std::printf("new recipe commit → serving on the stable endpoint: %.0f ms in all = sync and ingest %.0f ms + feasibility %.0f ms + waiting %.0f ms "
                "+ start and qualification %.0f ms + promotion %.0f ms + start and switch %.0f ms\n",
                serving, candidate, judged - candidate, qualifying - judged, validated - qualifying, promoted - validated, serving - promoted);
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.size() == 6 && args[0] == "--load") return load(args[1], std::stoi(args[2]), args[3], std::stod(args[4]), std::stoi(args[5]));
    if (const char* load = std::getenv("ANVIL_LOG"); !load) setenv("ANVIL_LOG", "error", 1);
    spdlog::set_level(spdlog::level::err);

    anvil::test::TempDir dir;
    if (args.size() == 1 && args[0] == "--serving") {  // sections 3 and 4 alone
        bench_commit_to_serving(dir.path());
        return 0;
    }
    anvil::test::GitRepo repo(dir / "registry");
    const auto t = Clock::now();
    for (int i = 0; i < 10000; ++i) repo.write("recipes/bench-recipe-" + std::to_string(i) + ".json", gpu_recipe(i));
    repo.commit("10,000 recipes");
    std::printf("(a registry of 10,000 recipes written and committed in %.1f s; load average %s)\n", ms_since(t) / 1000,
                anvil::test::read_file("/proc/loadavg").substr(0, 14).c_str());
    bench_pass(dir.path(), repo);
    bench_api(dir.path(), repo);
    bench_commit_to_serving(dir.path());
    return 0;
}
