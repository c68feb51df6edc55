// Engine driver speed: time from EmbeddedDriver::start to ready for anvil-engine on the tiny model,
// against the baseline of launching the same argv by hand (fork + execvp, same readiness polling).
// The difference is what the driver adds (record, keeper, log pump, port check): target under 50 ms.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "daemon/drivers/embedded_driver.hpp"
#include "daemon/drivers/readiness.hpp"
#include "bench_support.hpp"
#include "test_support.hpp"

using namespace anvil::drivers;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

void poll_ready(const std::string& host, int port, const std::string& model) {
    auto pause = std::chrono::milliseconds(2);
    while (!(health_ok(host, port, std::chrono::seconds(1)) && models_list(host, port, model, std::chrono::seconds(1)))) {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::milliseconds(200));
    }
}

}  // namespace

int main(int argc, char** argv) {
    const int runs = argc > 1 ? std::stoi(argv[1]) : 7;
    spdlog::set_level(spdlog::level::warn);
    anvil::test::TempDir dir;
    if (anvil::test::run({ANVIL_ENGINE, "make-model", "--out", (dir / "models/tiny").string(), "--preset", "tiny"}).exit_code != 0) {
        std::fprintf(stderr, "bench_driver: make-model failed\n");
        return 1;
    }
    anvil::registry::Recipe r;
    r.id = "bench-tiny";
    r.hardware_id = "cpu";
    r.launch.kind = "embedded";
    r.launch.model = anvil::registry::ModelRef{"${MODEL_ROOT}/tiny", {}, {}, {}, "f32", {}};
    r.launch.arguments = {"--max-context", "64", "--max-seqs", "1", "--threads", "1"};
    r.serving.served_model_name = "tiny";
    LaunchConfig config;
    config.placeholders = {{"MODEL_ROOT", (dir / "models").string()}};
    config.allowed_roots = {dir / "models"};
    config.port_first = 24000;
    config.port_last = 24999;
    EmbeddedDriver driver(ANVIL_ENGINE, {.state_dir = dir / "state"});

    std::vector<double> by_driver, by_hand;
    for (int i = 0; i < runs; ++i) {
        const auto launch = resolve_launch(r, config);
        auto t = Clock::now();
        const auto e = driver.start({r.id, "bench"}, launch);
        wait_ready(driver, e, std::chrono::seconds(60));
        by_driver.push_back(ms_since(t));
        driver.stop(e, std::chrono::seconds(5));

        const auto argv_hand = embedded_argv(ANVIL_ENGINE, resolve_launch(r, config));
        const int port = std::stoi(argv_hand.back());
        std::vector<char*> cargv;
        for (const auto& a : argv_hand) cargv.push_back(const_cast<char*>(a.c_str()));
        cargv.push_back(nullptr);
        t = Clock::now();
        const pid_t pid = ::fork();
        if (pid == 0) {
            ::freopen("/dev/null", "w", stdout);
            ::freopen("/dev/null", "w", stderr);
            ::execv(cargv[0], cargv.data());
            ::_exit(127);
        }
        poll_ready("127.0.0.1", port, "tiny");
        by_hand.push_back(ms_since(t));
        ::kill(pid, SIGTERM);
        ::waitpid(pid, nullptr, 0);
    }
    const double driver_ms = anvil::bench::median(by_driver), hand_ms = anvil::bench::median(by_hand);
    std::printf("embedded engine, tiny model, start to ready: %.1f ms median of %d (by hand: %.1f ms)\n", driver_ms, runs, hand_ms);
    std::printf("driver overhead: %.1f ms (target < 50 ms) %s\n", driver_ms - hand_ms, driver_ms - hand_ms < 50 ? "ok" : "OVER");
    return 0;
}
