// anvild: the reconciling daemon. Reads its configuration, opens the ledger, starts the stable
// endpoint and the REST API, and runs reconcile passes on a timer and whenever something asks for
// one. SIGHUP reloads the configuration (a bad one is refused and the old one kept); SIGTERM stops
// accepting, finishes the pass and exits 0, leaving engines running unless configured otherwise.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "daemon/anvild/api_server.hpp"
#include "daemon/anvild/api_views.hpp"
#include "daemon/anvild/wiring.hpp"
#include "daemon/config/config.hpp"
#include "daemon/controller/daemon_metrics.hpp"
#include "daemon/controller/reconciler.hpp"
#include "daemon/anvild/systemd_notify.hpp"
#include "daemon/endpoint/stable_endpoint.hpp"
#include "engine/http/guarded_server.hpp"
#include "support/atomic_file.hpp"
#include "state/store.hpp"

namespace {

using namespace anvil;
using Clock = std::chrono::steady_clock;

constexpr const char* kUsage = R"(usage: anvild [--config FILE] [--data-dir DIR] [--listen HOST:PORT] [--serve HOST:PORT] [--check-config]

  --config FILE       configuration (default /etc/anvil/anvild.json; see examples/anvild.json)
  --data-dir DIR      where the ledger, registry clones, engines' state and receipts live
  --listen HOST:PORT  the REST API (default from the configuration, 127.0.0.1:7700)
  --serve HOST:PORT   the stable OpenAI-compatible endpoint (default 127.0.0.1:7701)
  --check-config      validate the configuration and exit: 0 valid, 2 not
environment: ANVIL_LOG=debug|info|warn|error (default info)
)";

// Signals arrive on one thread (sigwait); the loop sees them as flags and a wake-up.
struct Loop {
    std::mutex mutex;
    std::condition_variable cv;
    bool woken = false;
    std::atomic<bool> terminate{false};
    std::atomic<bool> reload{false};
    std::atomic<std::int64_t> heartbeat{0};  // steady-clock seconds of the loop's last progress

    void wake() {
        {
            std::lock_guard lock(mutex);
            woken = true;
        }
        cv.notify_all();
    }
    void beat() { heartbeat = std::chrono::duration_cast<std::chrono::seconds>(Clock::now().time_since_epoch()).count(); }
};

struct Options {
    std::string config_file = daemon::kDefaultConfigFile;
    daemon::ConfigOverrides overrides;
    bool check_only = false;
};

Options parse_arguments(int argc, char** argv) {
    Options o;
    std::vector<std::string> args(argv + 1, argv + argc);
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= args.size()) throw std::invalid_argument(a + " needs a value");
            return args[++i];
        };
        if (a == "--help" || a == "-h") {
            std::cout << kUsage;
            std::exit(0);
        } else if (a == "--config") o.config_file = value();
        else if (a == "--data-dir") o.overrides.data_dir = value();
        else if (a == "--listen") o.overrides.listen = daemon::parse_host_port(value(), "--listen");
        else if (a == "--serve") o.overrides.serve = daemon::parse_host_port(value(), "--serve");
        else if (a == "--check-config") o.check_only = true;
        else throw std::invalid_argument("unknown argument '" + a + "'");
    }
    return o;
}

daemon::DaemonConfig load(const Options& o) {
    auto config = daemon::load_config(o.config_file);
    daemon::apply_overrides(config, o.overrides);
    return config;
}

std::string status_line(const nlohmann::json& s) {
    std::string line = s["default"].is_null() ? "no default yet" : "default " + s["default"]["recipe_id"].get<std::string>();
    line += "; " + std::to_string(s["recipes"].value("validated", 0)) + " validated, " + std::to_string(s["recipes"].value("candidate", 0)) +
            " candidates, " + std::to_string(s["recipes"].value("rejected", 0)) + " rejected";
    if (!s["qualifying"].is_null()) line += "; qualifying revision " + std::to_string(s["qualifying"].get<std::int64_t>());
    return line;
}

// The data directory holds the ledger, the API token, engine logs, receipts and quality samples:
// only anvild's user may read it. New files are private by the process umask (077, set first in
// main); what an older anvild left readable (0755 directories, 0644 files) is tightened here, once
// at start. Symbolic links are not followed: what they point to is not ours to change.
void restrict_data_dir(const std::filesystem::path& data_dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::create_directories(data_dir, ec);
    auto tighten = [](const fs::path& p) {
        struct stat st {};
        if (::lstat(p.c_str(), &st) != 0 || S_ISLNK(st.st_mode)) return;
        if ((st.st_mode & 077) == 0) return;
        if (::chmod(p.c_str(), st.st_mode & 07700) != 0) spdlog::warn("cannot make {} private: {}", p.string(), std::strerror(errno));
    };
    tighten(data_dir);
    for (auto it = fs::recursive_directory_iterator(data_dir, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
        tighten(it->path());
    if (ec) spdlog::warn("data directory {}: {} (some files may still be readable by others)", data_dir.string(), ec.message());
}

// One life of the daemon's parts under one configuration. Returns when asked to stop or reload.
void run(daemon::DaemonConfig& config, state::Store& store, endpoint::StableEndpoint& endpoint, Loop& loop, const std::string& token) {
    daemon::DaemonMetrics metrics;
    // The endpoint is bound already: what the API reports (and a reload keeps) is the port it has.
    if (config.serve.port == 0) config.serve.port = endpoint.port();
    // The endpoint outlives a reload: it takes the configuration's names and origins each time.
    endpoint.http().set_origin_policy({config.allowed_hosts, config.allowed_origins});
    daemon::ProductionController controller(config, store, endpoint, metrics);
    daemon::Reconciler& reconciler = controller.reconciler();
    reconciler.set_wake([&loop] { loop.wake(); });
    // Clients that connect meanwhile wait in the endpoint's queue: it accepts once it forwards to
    // the default's adopted engine (or once there is none to adopt), so a restart shows them no 503.
    reconciler.start_up([&endpoint] {
        if (!endpoint.accepting()) endpoint.start();
    });
    daemon::ApiServer api(config, store, reconciler, metrics, token);
    api.start();
    // Port 0 chose a port once: a reload keeps answering where clients found it.
    if (config.listen.port == 0) config.listen.port = api.port();
    // Where this anvild answers, for tools and tests that start it on port 0.
    // The data directory exists: restrict_data_dir made it before the store opened there.
    const nlohmann::json addresses{{"pid", getpid()},
                                   {"api", config.listen.host + ":" + std::to_string(api.port())},
                                   {"serve", config.serve.host + ":" + std::to_string(endpoint.port())}};
    support::write_file_atomically(config.data_dir / "addresses.json", addresses.dump(), 0600);
    // The first pass reads every source once; READY=1 follows it. It is guarded as every pass is:
    // whatever it meets, anvild goes on to serve and the next pass starts from the ledger.
    auto run_pass = [&reconciler] {
        try {
            reconciler.pass();
        } catch (const std::exception& e) {
            // A pass that fails leaves state as the ledger says; the next one starts from there.
            spdlog::error("reconcile pass failed: {}", e.what());
        }
    };
    run_pass();
    loop.beat();
    spdlog::info("anvild ready: API on {}:{}, stable endpoint on {}:{}", config.listen.host, api.port(), config.serve.host, endpoint.port());
    daemon::notify_ready();
    daemon::notify_status(status_line(daemon::status_view(reconciler, store)));

    auto interval = config.reconcile_interval;
    for (const auto& s : config.sources) interval = std::min<std::chrono::milliseconds>(interval, s.poll_interval);
    while (!loop.terminate && !loop.reload) {
        {
            std::unique_lock lock(loop.mutex);
            loop.cv.wait_for(lock, interval, [&] { return loop.woken || loop.terminate || loop.reload; });
            loop.woken = false;
        }
        if (loop.terminate || loop.reload) break;
        run_pass();
        loop.beat();
        daemon::notify_status(status_line(daemon::status_view(reconciler, store)));
    }
    api.stop();
    reconciler.shut_down(loop.terminate && config.stop_engines_on_exit);
}

}  // namespace

int main(int argc, char** argv) {
    // Everything anvild creates (ledger, WAL, token, logs, receipts, records) is its user's alone.
    ::umask(077);
    spdlog::set_default_logger(spdlog::stderr_color_mt("anvild"));
    const char* level = std::getenv("ANVIL_LOG");
    spdlog::set_level(level ? spdlog::level::from_str(level) : spdlog::level::info);

    Options options;
    daemon::DaemonConfig config;
    try {
        options = parse_arguments(argc, argv);
        config = load(options);
    } catch (const daemon::ConfigError& e) {
        std::cerr << e.what() << "\n";
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "anvild: " << e.what() << " (see anvild --help)\n";
        return 2;
    }
    if (options.check_only) {
        std::cout << options.config_file << ": valid (" << config.sources.size() << " sources, data in " << config.data_dir.string() << ")\n";
        return 0;
    }

    // Signals go to the signal thread only, so no other thread is interrupted by them.
    sigset_t signals;
    sigemptyset(&signals);
    for (int s : {SIGHUP, SIGTERM, SIGINT}) sigaddset(&signals, s);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    signal(SIGPIPE, SIG_IGN);
    Loop loop;
    std::thread signal_thread([&] {
        for (;;) {
            int sig = 0;
            if (sigwait(&signals, &sig) != 0) continue;
            if (sig == SIGHUP) {
                spdlog::info("SIGHUP: reloading {}", options.config_file);
                loop.reload = true;
            } else {
                spdlog::info("{}: finishing the pass and stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
                loop.terminate = true;
                daemon::notify_stopping();
            }
            loop.wake();
            if (loop.terminate) return;
        }
    });

    int code = 0;
    try {
        restrict_data_dir(config.data_dir);
        const std::string token = daemon::ensure_token(daemon::token_path(config));
        state::Store store(config.data_dir / "anvil.db");
        if (!store.writable()) spdlog::error("{}", store.write_error());

        endpoint::EndpointOptions eo;
        eo.host = config.serve.host;
        eo.port = config.serve.port;
        eo.model_alias = config.served_model_alias;
        eo.drain_timeout = config.promotion.drain_timeout;
        eo.max_body_bytes = config.max_request_body_bytes;
        eo.origin_policy = http::OriginPolicy{config.allowed_hosts, config.allowed_origins};
        endpoint::StableEndpoint endpoint(eo);
        endpoint.bind();

        // The watchdog is fed while the loop makes progress; a step known to be long (an engine
        // starting) is allowed the engine's ready timeout before systemd is left to restart us.
        std::thread watchdog;
        std::atomic<bool> watchdog_stop{false};
        if (auto period = daemon::watchdog_interval()) {
            loop.beat();
            watchdog = std::thread([&, period = *period] {
                const auto tolerance = std::chrono::duration_cast<std::chrono::seconds>(config.engine_ready_timeout) + std::chrono::seconds(60);
                while (!watchdog_stop) {
                    const auto now = std::chrono::duration_cast<std::chrono::seconds>(Clock::now().time_since_epoch()).count();
                    if (now - loop.heartbeat < tolerance.count()) daemon::notify_watchdog();
                    std::this_thread::sleep_for(period / 2);
                }
            });
        }

        for (;;) {
            run(config, store, endpoint, loop, token);
            if (loop.terminate) break;
            loop.reload = false;
            try {
                auto next = load(options);
                if (next.serve.port == 0 && next.serve.host == config.serve.host) next.serve.port = config.serve.port;
                if (next.data_dir != config.data_dir || next.serve.str() != config.serve.str())
                    spdlog::warn("reload: data_dir and serve take effect at the next start; keeping {} and {}", config.data_dir.string(),
                                 config.serve.str());
                next.data_dir = config.data_dir;
                next.serve = config.serve;
                if (next.listen.port == 0 && next.listen.host == config.listen.host) next.listen.port = config.listen.port;
                config = std::move(next);
                daemon::notify_reloading();
                spdlog::info("configuration reloaded");
            } catch (const std::exception& e) {
                spdlog::error("reload refused, keeping the running configuration: {}", e.what());
            }
        }
        watchdog_stop = true;
        if (watchdog.joinable()) watchdog.join();
        endpoint.stop();
    } catch (const std::exception& e) {
        spdlog::error("{}", e.what());
        std::cerr << "anvild: " << e.what() << "\n";
        code = 1;
    }
    if (!loop.terminate) {
        loop.terminate = true;
        pthread_kill(signal_thread.native_handle(), SIGTERM);
    }
    signal_thread.join();
    spdlog::info("anvild stopped");
    return code;
}
