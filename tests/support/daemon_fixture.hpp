// A real anvild for end-to-end tests: a git registry in a temporary directory, a tiny generated model,
// a configuration, the daemon as a child process on free loopback ports, and helpers to call its API,
// its CLI and check its ledger. Shared by the daemon's e2e and hardening tests.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "registry/model_digest.hpp"
#include "state/inspection.hpp"
#include "state/store.hpp"
#include "test_support.hpp"

#ifdef ANVILD

namespace anvil::test::daemon {

using json = nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

inline bool eventually(const std::function<bool()>& done, std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        if (done()) return true;
        std::this_thread::sleep_for(200ms);
    }
    return done();
}

inline std::string embedded_recipe(const std::string& id, const std::string& weights, const std::string& digest) {
    return anvil::test::embedded_recipe_json(id, weights, digest);
}

inline std::string unpinned_container_recipe(const std::string& id) {
    json r = json::parse(embedded_recipe(id, "f32", "sha256:" + std::string(64, '0')));
    r["hardware_id"] = "cpu";
    r["launch"] = {{"kind", "docker"}, {"image", "docker.io/example/engine:latest"}, {"arguments", json::array()}, {"environment", json::object()}};
    return r.dump(2);
}

// One daemon under test: its registry, model, configuration, ports and process.
struct Daemon {
    anvil::test::TempDir dir;
    anvil::test::GitRepo repo{dir / "registry"};
    std::string digest;
    int api_port = 0, serve_port = 0;
    std::unique_ptr<anvil::test::ChildProcess> process;

    explicit Daemon(const std::string& policy = "auto") {
        const auto model = dir / "models" / "tiny";
        auto made = anvil::test::run({ANVIL_ENGINE, "make-model", "--out", model.string(), "--preset", "tiny", "--seed", "3"});
        REQUIRE(made.exit_code == 0);
        digest = anvil::registry::model_digest(model);
        json config = {{"sources", {{{"name", "test"}, {"url", (dir / "registry").string()}, {"ref", "main"}, {"poll_interval_seconds", 1}}}},
                       {"data_dir", (dir / "data").string()},
                       {"model_root", (dir / "models").string()},
                       {"inventory", "auto"},
                       {"engine_binary", ANVIL_ENGINE},
                       // Test processes run side by side: each gets its own engine ports. Forty of them,
                       // since one process may run many daemon tests in a row, and a port an engine served
                       // stays in TIME_WAIT (which anvild counts as taken) for a minute after it stops.
                       {"engine_ports", {{"first", 21000 + (getpid() % 22) * 40}, {"last", 21039 + (getpid() % 22) * 40}}},
                       {"requirements",
                        {{"tokens", {{"prompt", {{"value", 256}, {"unit", "tokens"}, {"status", "assumed"}, {"source", "test"}, {"observed_at", "2026-11-30"}}}}},
                         {"concurrency", {{"value", 1}, {"unit", "sequences"}, {"status", "assumed"}, {"source", "test"}, {"observed_at", "2026-11-30"}}},
                         {"physical_vram_bytes", {{"value", 0}, {"unit", "bytes"}, {"status", "measured"}, {"source", "test"}, {"observed_at", "2026-11-30"}}},
                         {"thresholds", json::object()}}},
                       {"promotion", {{"policy", policy}, {"min_interval_seconds", 0}, {"attempts", 1}, {"warm_e2e_min_seconds", 0}}},
                       {"reconcile_interval_seconds", 1},
                       {"stop_engines_on_exit", true}};
        anvil::test::write_file(dir / "anvild.json", config.dump(2));
    }
    ~Daemon() { stop(); }

    // `serve`: the stable endpoint's address (a free port by default; a test that restarts anvild
    // under a client gives a fixed one).
    void start(const std::string& serve = "127.0.0.1:0") {
        setenv("ANVIL_LOG", std::getenv("ANVIL_TEST_DAEMON_LOG") ? std::getenv("ANVIL_TEST_DAEMON_LOG") : "warn", 1);
        // Port 0: the daemon binds free ports and says which in addresses.json, so tests running
        // side by side never race for the same port.
        fs::remove(dir / "data" / "addresses.json");
        process = std::make_unique<anvil::test::ChildProcess>(
            std::vector<std::string>{ANVILD, "--config", (dir / "anvild.json").string(), "--listen", "127.0.0.1:0", "--serve", serve});
        REQUIRE(eventually([&] {
            if (!fs::exists(dir / "data" / "addresses.json")) return false;
            const json a = json::parse(anvil::test::read_file(dir / "data" / "addresses.json"), nullptr, false);
            if (!a.is_object() || a["pid"] != process->pid()) return false;
            api_port = std::stoi(a["api"].get<std::string>().substr(a["api"].get<std::string>().rfind(':') + 1));
            serve_port = std::stoi(a["serve"].get<std::string>().substr(a["serve"].get<std::string>().rfind(':') + 1));
            return true;
        }, 60s));
        REQUIRE(eventually([&] { return get("/readyz").first == 200; }, 60s));
    }
    void stop() {
        if (!process) return;
        process->kill(SIGTERM);
        CHECK(process->wait() == 0);
        process.reset();
    }
    void kill() {
        process->kill(SIGKILL);
        process->wait();
        process.reset();
    }
    std::string token() const {
        std::string t = anvil::test::read_file(dir / "data" / "api-token");
        while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
        return t;
    }

    std::pair<int, json> get(const std::string& path) const {
        httplib::Client c("127.0.0.1", api_port);
        c.set_connection_timeout(2);
        auto r = c.Get(path.c_str());
        if (!r) return {0, nullptr};
        return {r->status, json::parse(r->body, nullptr, false)};
    }
    std::pair<int, json> post(const std::string& path, const std::string& body, bool with_token = true) const {
        httplib::Client c("127.0.0.1", api_port);
        httplib::Headers h;
        if (with_token) h.emplace("Authorization", "Bearer " + token());
        auto r = c.Post(path.c_str(), h, body, "application/json");
        if (!r) return {0, nullptr};
        return {r->status, json::parse(r->body, nullptr, false)};
    }
    // The recipe the stable endpoint forwards to now, or "" when it forwards to nothing.
    std::string serving() const {
        const json s = get("/api/v1/status").second;
        if (!s.is_object() || !s["endpoint"]["upstream"].is_object()) return "";
        return s["endpoint"]["upstream"]["recipe_id"].get<std::string>();
    }
    std::string status_of(const std::string& recipe) const {
        auto [code, body] = get("/api/v1/recipes/" + recipe);
        return code == 200 ? body["data"]["status"].get<std::string>() : "";
    }
    anvil::test::ProcessResult cli(std::vector<std::string> args) const {
        setenv("ANVIL_API", ("127.0.0.1:" + std::to_string(api_port)).c_str(), 1);
        setenv("ANVIL_TOKEN_FILE", (dir / "data" / "api-token").c_str(), 1);
        args.insert(args.begin(), ANVIL_CLI);
        return anvil::test::run(args);
    }
};

// After a clean stop: the ledger is whole, its derived statuses match, and no engine is left running.
inline void check_ledger(const Daemon& d) {
    anvil::state::Store store(d.dir / "data" / "anvil.db");
    CHECK(anvil::state::Inspection(store).integrity_check() == "ok");
    CHECK(anvil::state::Inspection(store).statuses() == anvil::state::Inspection(store).statuses_from_ledger());
    CHECK(store.running_engines().empty());
}

// Engines that wait while `held` exists before they start: a qualification that stays under way as
// long as a test needs it to. Each engine's wrapper writes its pid where the test can find it.
struct EngineGate {
    fs::path held, pids;

    explicit EngineGate(Daemon& d) : held(d.dir / "engines-held"), pids(d.dir / "engine-pids") {
        const fs::path wrapper = d.dir / "held-engine.sh";
        anvil::test::write_file(wrapper, "#!/bin/sh\necho $$ >> '" + pids.string() + "'\nwhile [ -e '" + held.string() +
                                             "' ]; do sleep 0.1; done\nexec '" + ANVIL_ENGINE + "' \"$@\"\n");
        fs::permissions(wrapper, fs::perms::owner_all);
        json config = json::parse(anvil::test::read_file(d.dir / "anvild.json"));
        config["engine_binary"] = wrapper.string();
        anvil::test::write_file(d.dir / "anvild.json", config.dump(2));
    }
    void hold() const { anvil::test::write_file(held, ""); }
    void release() const { fs::remove(held); }
    // The engines started so far that are still alive.
    std::size_t alive() const {
        std::size_t n = 0;
        if (!fs::exists(pids)) return 0;
        std::istringstream in(anvil::test::read_file(pids));
        for (pid_t pid = 0; in >> pid;) n += ::kill(pid, 0) == 0;
        return n;
    }
};

}  // namespace anvil::test::daemon

#endif  // ANVILD
