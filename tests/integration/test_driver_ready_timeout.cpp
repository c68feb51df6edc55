// How long an engine may take to become ready: its recipe's launch.ready_timeout_seconds when the
// recipe gives one (a large model loading), else the daemon's engine_ready_timeout_seconds, 600 s
// by default — and the supervisor really waits that long, not longer.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>

#include "daemon/config/config.hpp"
#include "daemon/drivers/engine_supervisor.hpp"
#include "daemon/drivers/launch_resolution.hpp"
#include "registry/document.hpp"
#include "state/store.hpp"
#include "test_support.hpp"

using namespace anvil;
using namespace std::chrono_literals;

TEST_CASE("a recipe's ready timeout wins over the daemon's, which is 600 s unless configured", "[driver][ready-timeout]") {
    CHECK(daemon::DaemonConfig{}.engine_ready_timeout == 600s);
    CHECK(drivers::LaunchConfig{}.ready_timeout == 600s);
    registry::Recipe r;
    r.id = "slow";
    r.launch.kind = "native";
    r.launch.arguments = {"sleep", "30"};
    drivers::LaunchConfig config;
    config.port_first = 24100;
    config.port_last = 24199;
    config.ready_timeout = 120s;  // the daemon's
    CHECK(drivers::resolve_launch(r, config).ready_timeout == 120s);
    r.launch.ready_timeout_seconds = 1800;
    CHECK(drivers::resolve_launch(r, config).ready_timeout == 1800s);
}

TEST_CASE("the supervisor gives up on an engine after its recipe's ready timeout, not the daemon's", "[driver][daemon][ready-timeout]") {
    test::TempDir tmp;
    auto j = nlohmann::json::parse(test::read_file(std::string(ANVIL_EXAMPLES_DIR) + "/registry/recipes/anvil-tiny-llama-f32-cpu.json"));
    j["id"] = "never-ready";
    j["engine"]["name"] = "sleep";  // no engine anvil knows by name: its arguments are run as written
    // An engine that runs but never answers /health.
    j["launch"] = {{"kind", "native"}, {"arguments", {"sleep", "60"}}, {"environment", nlohmann::json::object()}, {"ready_timeout_seconds", 1}};
    const auto doc = registry::parse_document(j.dump(), {"test", "", "recipes/never-ready.json", "", ""});
    REQUIRE(doc.valid());
    REQUIRE(doc.recipe());
    REQUIRE(doc.recipe()->launch.ready_timeout_seconds == 1);

    state::Store store(tmp / "state.db");
    const auto revision = store.ingest_revision(0, doc).revision_id;
    daemon::DaemonConfig config;
    config.data_dir = tmp / "data";
    config.engine_ready_timeout = 600s;
    config.port_first = 24200;
    config.port_last = 24299;
    anvil::drivers::EngineSupervisor supervisor(anvil::daemon::supervisor_settings(config), store);
    const auto before = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(supervisor.start(revision, *doc.recipe(), anvil::drivers::EngineRole::qualification), Catch::Contains("not ready after 1000 ms"));
    CHECK(std::chrono::steady_clock::now() - before < 20s);
    CHECK(supervisor.engines().empty());
}
