// The embedded driver: anvil-engine serve from this build, started from a recipe on the tiny model,
// ready only when /v1/models lists the promised name, and stopped within the grace; a recipe
// pinning a GGUF file served as stored.
#include <catch2/catch.hpp>
#include <chrono>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "daemon/drivers/embedded_driver.hpp"
#include "daemon/drivers/process_spawn.hpp"
#include "daemon/drivers/readiness.hpp"
#include "test_support.hpp"

using namespace anvil::drivers;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

anvil::registry::Recipe tiny_recipe(const std::string& model_dir_name) {
    anvil::registry::Recipe r;
    r.id = "tiny-embedded";
    r.hardware_id = "cpu";  // a GPU recipe's engine is started on cuda:0
    r.launch.kind = "embedded";
    r.launch.model = anvil::registry::ModelRef{"${MODEL_ROOT}/" + model_dir_name, {}, {}, {}, "f32", {}};
    r.launch.arguments = {"--weights", "f32", "--max-context", "64", "--max-seqs", "1", "--threads", "1"};
    r.serving.served_model_name = "tiny-chat";
    return r;
}

LaunchConfig config_for(const anvil::test::TempDir& dir, int first) {
    LaunchConfig c;
    c.placeholders = {{"MODEL_ROOT", (dir / "models").string()}};
    c.allowed_roots = {dir / "models"};
    c.port_first = first;
    c.port_last = first + 99;
    return c;
}

}  // namespace

TEST_CASE("the embedded driver starts anvil-engine from a recipe and it is ready with the promised model id", "[driver]") {
    anvil::test::TempDir dir;
    const auto made = anvil::test::run({ANVIL_ENGINE, "make-model", "--out", (dir / "models/tiny").string(), "--preset", "tiny", "--seed", "3"});
    REQUIRE(made.exit_code == 0);
    EmbeddedDriver d(ANVIL_ENGINE, {.state_dir = dir / "state"});
    const auto launch = resolve_launch(tiny_recipe("tiny"), config_for(dir, 23500));
    const auto e = d.start({"tiny-embedded", "rev1"}, launch);
    CHECK(e.driver == "embedded");
    CHECK(e.served_model_name == "tiny-chat");
    wait_ready(d, e, 60s);
    const Probe p = d.probe(e);
    CHECK(p.state == RunState::running);
    CHECK(p.healthy);
    CHECK(models_list("127.0.0.1", launch.port, "tiny-chat", 2s));
    CHECK_FALSE(models_list("127.0.0.1", launch.port, "tiny", 2s));
    CHECK(d.logs(e, 50).find("listening on http://127.0.0.1:" + std::to_string(launch.port)) != std::string::npos);

    const auto t0 = std::chrono::steady_clock::now();
    d.stop(e, 10s);
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
    CHECK(d.probe(e).exit_code == 0);  // anvil-engine stops cleanly on SIGTERM
    CHECK_FALSE(same_process_alive(e.pid, e.start_time));
    CHECK(d.adopt().empty());
}

TEST_CASE("an embedded engine whose model cannot load fails readiness at once with its exit code and log", "[driver]") {
    anvil::test::TempDir dir;
    fs::create_directories(dir / "models/empty");
    EmbeddedDriver d(ANVIL_ENGINE, {.state_dir = dir / "state"});
    const auto e = d.start({"tiny-embedded", "rev1"}, resolve_launch(tiny_recipe("empty"), config_for(dir, 23600)));
    CHECK_THROWS_WITH(wait_ready(d, e, 60s), Catch::Contains("exited with code 1") && Catch::Contains("cannot load"));

    auto native = tiny_recipe("tiny");
    native.launch.kind = "native";
    CHECK_THROWS_WITH(d.start({"x", "r"}, resolve_launch(native, config_for(dir, 23600))), Catch::Contains("not 'embedded'"));
}

TEST_CASE("the embedded driver serves a recipe whose model is a GGUF file, as stored", "[driver][gguf]") {
    anvil::test::TempDir dir;
    const auto made = anvil::test::run(
        {ANVIL_ENGINE, "make-model", "--out", (dir / "models/tiny.q8_0.gguf").string(), "--preset", "tiny", "--dtype", "q8_0", "--seed", "3"});
    REQUIRE(made.exit_code == 0);
    anvil::registry::Recipe r = tiny_recipe("tiny.q8_0.gguf");
    r.launch.model->dtype = "q8_0";
    r.launch.arguments = {"--weights", "stored", "--max-context", "64", "--max-seqs", "1", "--threads", "1"};
    EmbeddedDriver d(ANVIL_ENGINE, {.state_dir = dir / "state"});
    const auto launch = resolve_launch(r, config_for(dir, 23800));
    const auto e = d.start({"tiny-gguf", "rev1"}, launch);
    wait_ready(d, e, 60s);
    CHECK(models_list("127.0.0.1", launch.port, "tiny-chat", 2s));
    // The recipe's --weights stored: the file's Q8_0 blocks as they are, not widened to f32.
    CHECK(d.logs(e, 50).find("stored weights") != std::string::npos);
    httplib::Client client("127.0.0.1", launch.port);
    const auto answer = client.Post("/v1/completions", R"({"model": "tiny-chat", "prompt": "Hello", "max_tokens": 3, "temperature": 0})",
                                    "application/json");
    REQUIRE(answer);
    CHECK(answer->status == 200);
    CHECK(nlohmann::json::parse(answer->body)["usage"]["completion_tokens"].get<int>() >= 1);
    d.stop(e, 10s);
    CHECK(d.probe(e).exit_code == 0);
}
