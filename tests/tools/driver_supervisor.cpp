// A stand-in for the daemon in the drivers' no-orphans test: adopts the embedded engines a previous
// run started, starts the ones missing (one per recipe sup-0 … sup-N-1), waits until all are ready,
// prints what it did, then waits to be killed. With --stop-all it stops what it adopted and exits.
#include <unistd.h>

#include <iostream>
#include <set>
#include <string>

#include <spdlog/spdlog.h>

#include "daemon/drivers/embedded_driver.hpp"
#include "daemon/drivers/readiness.hpp"

using namespace anvil::drivers;

int main(int argc, char** argv) {
    std::string state, engine, model;
    int count = 1, port_first = 0;
    bool stop_all = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
        if (a == "--state") state = next();
        else if (a == "--engine") engine = next();
        else if (a == "--model") model = next();
        else if (a == "--count") count = std::stoi(next());
        else if (a == "--port-first") port_first = std::stoi(next());
        else if (a == "--stop-all") stop_all = true;
        else {
            std::cerr << "usage: driver_supervisor --state DIR --engine BIN --model DIR --port-first N [--count N] [--stop-all]\n";
            return 2;
        }
    }
    spdlog::set_level(spdlog::level::warn);
    try {
        EmbeddedDriver driver(engine, {.state_dir = state, .log_cap_bytes = 1 << 20});
        auto engines = driver.adopt();
        std::set<std::string> running;
        std::set<int> ports;
        for (const auto& e : engines) {
            std::cout << "adopted " << e.recipe.recipe_id << " " << e.pid << " " << e.port << std::endl;
            running.insert(e.recipe.recipe_id);
            ports.insert(e.port);
        }
        if (stop_all) {
            for (const auto& e : engines) driver.stop(e, std::chrono::seconds(5));
            std::cout << "stopped " << engines.size() << std::endl;
            return 0;
        }
        const std::filesystem::path model_path = std::filesystem::absolute(model);
        LaunchConfig config;
        config.placeholders["MODEL_ROOT"] = model_path.parent_path().string();
        config.allowed_roots = {model_path.parent_path()};
        config.port_first = port_first;
        config.port_last = port_first + 99;
        for (int i = 0; i < count; ++i) {
            anvil::registry::Recipe r;
            r.id = "sup-" + std::to_string(i);
            r.hardware_id = "cpu";
            if (running.count(r.id)) continue;
            r.launch.kind = "embedded";
            r.launch.model = anvil::registry::ModelRef{"${MODEL_ROOT}/" + model_path.filename().string(), {}, {}, {}, "f32", {}};
            r.launch.arguments = {"--max-context", "64", "--max-seqs", "1", "--threads", "1"};
            r.serving.served_model_name = r.id;
            const auto launch = resolve_launch(r, config, ports);
            ports.insert(launch.port);
            const auto e = driver.start({r.id, "test"}, launch);
            std::cout << "started " << r.id << " " << e.pid << " " << e.port << std::endl;
            engines.push_back(e);
        }
        for (const auto& e : engines) wait_ready(driver, e, std::chrono::seconds(60));
        std::cout << "ready" << std::endl;
    } catch (const std::exception& e) {
        std::cerr << "driver_supervisor: " << e.what() << "\n";
        return 1;
    }
    for (;;) ::pause();
}
