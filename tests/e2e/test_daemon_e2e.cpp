// anvild end to end on loopback: a real git registry, the daemon as a child process, the embedded
// engine it launches, and the REST API, CLI and stable endpoint checked as commits add, change
// and break recipes; SIGKILL in the middle of work and a restart lose and duplicate nothing.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "daemon/drivers/launch_resolution.hpp"
#include "registry/model_digest.hpp"
#include "state/store.hpp"
#include "daemon_fixture.hpp"
#include "test_support.hpp"

using json = nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

#ifdef ANVILD

using namespace anvil::test::daemon;

TEST_CASE("anvild follows a git registry: recipes added, broken and changed by commits, through the API and the CLI", "[daemon][e2e]") {
    Daemon d;
    d.repo.write("recipes/tiny-f32.json", embedded_recipe("tiny-f32", "f32", d.digest));
    d.repo.write("recipes/unpinned.json", unpinned_container_recipe("unpinned"));
    d.repo.write("recipes/broken.json", "{\"schema_version\": \"anvil.recipe/v1\", \"id\": ");
    const std::string first = d.repo.commit("first recipes");
    d.start();

    // The only feasible, pinned recipe is qualified and becomes the first default.
    REQUIRE(eventually([&] { return d.status_of("tiny-f32") == "promoted"; }, 120s));
    CHECK(d.status_of("unpinned") == "rejected");
    auto [code, def] = d.get("/api/v1/default");
    REQUIRE(code == 200);
    CHECK(def["data"]["recipe_id"] == "tiny-f32");

    // Listing, pagination and filters in local-ai-registry's list shape.
    auto [lc, list] = d.get("/api/v1/recipes?limit=1");
    REQUIRE(lc == 200);
    CHECK(list["meta"]["total"] == 2);
    CHECK(list["data"].size() == 1);
    CHECK(list["links"]["next"].is_string());
    auto [fc, rejected] = d.get("/api/v1/recipes?status=rejected");
    CHECK(rejected["data"][0]["id"] == "unpinned");
    CHECK(d.get("/api/v1/recipes?status=nonsense").first == 400);

    // The GPU inventory: what NVML says now (here, plainly, that there is no driver, unless there
    // is one), and what feasibility judges with.
    auto [ic, inventory] = d.get("/api/v1/inventory");
    REQUIRE(ic == 200);
    const auto& now = inventory["data"]["measured_now"];
    CHECK(now["available"].is_boolean());
    if (!now["available"].get<bool>()) CHECK_THAT(now["error"].get<std::string>(), Catch::Contains("libnvidia-ml"));
    CHECK(inventory["data"]["judging_with"]["source"].is_string());

    // Why it was rejected, with the commit every fact came from.
    auto [hc, history] = d.get("/api/v1/recipes/unpinned/history");
    REQUIRE(hc == 200);
    CHECK(history["data"].back()["to"] == "rejected");
    CHECK_THAT(history["data"].back()["reason"].get<std::string>(), Catch::Contains("unpinned"));
    auto [dc, detail] = d.get("/api/v1/recipes/tiny-f32");
    REQUIRE(dc == 200);
    CHECK(detail["data"]["revisions"][0]["commit"] == first);
    bool local_measured = false;
    for (const auto& e : detail["data"]["evidence"])
        local_measured = local_measured || (e["class"] == "local" && e["status"] == "measured" && e["receipt_sha256"].is_string());
    CHECK(local_measured);
    CHECK(d.get("/api/v1/recipes/tiny-f32/feasibility").second["data"]["class"] == "benchmark-survivor");

    // The broken document is reported, not ingested.
    auto [rc, registry] = d.get("/api/v1/registry");
    REQUIRE(rc == 200);
    CHECK(registry["data"][0]["commit"] == first);
    REQUIRE(registry["data"][0]["invalid"].size() == 1);
    CHECK(registry["data"][0]["invalid"][0]["path"] == "recipes/broken.json");
    CHECK(d.get("/api/v1/recipes/broken").first == 404);

    // Writes need the token; errors are JSON.
    auto [uc, unauthorized] = d.post("/api/v1/registry/sync", "", false);
    CHECK(uc == 401);
    CHECK(unauthorized["error"]["code"] == "unauthorized");
    CHECK(d.post("/api/v1/default", "{not json").first == 400);
    CHECK(d.get("/api/v1/nothing-here").first == 404);

    // The stable endpoint serves the default (once its engine is up: promotion comes first).
    REQUIRE(eventually([&] { return d.serving() == "tiny-f32"; }, 60s));
    httplib::Client endpoint("127.0.0.1", d.serve_port);
    auto answer = endpoint.Post("/v1/completions", R"({"model": "anvil-default", "prompt": "Hello", "max_tokens": 4, "temperature": 0})",
                                "application/json");
    REQUIRE(answer);
    CHECK(answer->status == 200);

    // A second commit: a new recipe, and the broken one fixed as a second new recipe.
    d.repo.write("recipes/tiny-q8.json", embedded_recipe("tiny-q8", "q8", d.digest));
    d.repo.git({"rm", "-q", "recipes/broken.json"});
    const std::string second = d.repo.commit("q8 variant");
    CHECK(d.post("/api/v1/registry/sync", "").first == 202);
    REQUIRE(eventually([&] { auto s = d.status_of("tiny-q8"); return s == "validated" || s == "promoted"; }, 120s));
    CHECK(d.get("/api/v1/registry").second["data"][0]["commit"] == second);
    CHECK(d.get("/api/v1/registry").second["data"][0]["invalid"].empty());

    // The CLI reads the same API; pinning switches the default under steady load with no failures.
    auto recipes = d.cli({"recipes", "--json"});
    REQUIRE(recipes.exit_code == 0);
    CHECK(json::parse(recipes.output)["meta"]["total"] == 3);
    CHECK(d.cli({"status"}).exit_code == 0);

    std::atomic<bool> load{true};
    std::atomic<int> ok{0}, failed{0};
    std::vector<std::thread> clients;
    for (int t = 0; t < 3; ++t)
        clients.emplace_back([&, t] {
            httplib::Client c("127.0.0.1", d.serve_port);
            c.set_read_timeout(30);
            while (load) {
                const bool stream = t == 0;
                auto r = c.Post("/v1/chat/completions",
                                json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 8}, {"stream", stream}}.dump(),
                                "application/json");
                (r && r->status == 200 ? ok : failed)++;
            }
        });
    // The same list query before and after the switch: a page cached before it must not be served after.
    const std::string promoted_query = "/api/v1/recipes?status=promoted&limit=10";
    CHECK(d.get(promoted_query).second["data"][0]["id"] == "tiny-f32");
    CHECK(d.get(promoted_query).second["data"][0]["id"] == "tiny-f32");  // the second answer is the cached page
    auto pinned = d.cli({"pin", "tiny-q8"});
    CHECK(pinned.exit_code == 0);
    REQUIRE(eventually([&] { return d.serving() == "tiny-q8"; }, 60s));
    std::this_thread::sleep_for(1s);
    load = false;
    for (auto& c : clients) c.join();
    CHECK(failed == 0);
    CHECK(ok > 0);
    CHECK(d.status_of("tiny-q8") == "promoted");
    CHECK(d.status_of("tiny-f32") == "retired");
    CHECK(d.get(promoted_query).second["data"][0]["id"] == "tiny-q8");
    CHECK(d.get(promoted_query).second["meta"]["total"] == 1);
    auto q8_history = d.get("/api/v1/recipes/tiny-q8/history").second["data"];
    CHECK_THAT(q8_history.back()["actor"].get<std::string>(), Catch::StartsWith("api:"));
    CHECK(d.cli({"unpin"}).exit_code == 0);
    CHECK(d.cli({"unpin"}).exit_code == 1);  // nothing pinned any more: anvild says no

    // Freeze and unfreeze are recorded with their actor.
    CHECK(d.cli({"freeze", "--reason", "maintenance"}).exit_code == 0);
    CHECK(d.get("/api/v1/status").second["policy"]["frozen"] == true);
    CHECK(d.cli({"unfreeze"}).exit_code == 0);

    // A third commit changes the default's recipe: the new revision does not inherit promoted.
    d.repo.write("recipes/tiny-q8.json", embedded_recipe("tiny-q8", "q8", d.digest) + "\n");
    json changed = json::parse(embedded_recipe("tiny-q8", "q8", d.digest));
    changed["description"] = "changed";
    d.repo.write("recipes/tiny-q8.json", changed.dump(2));
    d.repo.commit("describe q8");
    d.post("/api/v1/registry/sync", "");
    REQUIRE(eventually([&] { return d.get("/api/v1/recipes/tiny-q8").second["data"]["revisions"].size() == 2; }, 30s));
    // It enters as a candidate, whatever happened since (on a loaded machine it may already have
    // been qualified and promoted over its predecessor by the time this looks).
    auto revisions = d.get("/api/v1/recipes/tiny-q8").second["data"]["revisions"];
    const auto newest = std::max(revisions[0]["revision_id"].get<std::int64_t>(), revisions[1]["revision_id"].get<std::int64_t>());
    std::vector<json> entered;
    const json q8_transitions = d.get("/api/v1/recipes/tiny-q8/history").second["data"];
    INFO(revisions.dump() << "\n" << q8_transitions.dump());
    for (const auto& t : q8_transitions)
        if (t["revision_id"] == newest && t["from"].is_null()) entered.push_back(t);
    REQUIRE(entered.size() == 1);
    CHECK(entered[0]["to"] == "candidate");
    for (const auto& r : revisions)
        if (r["revision_id"] != newest) CHECK(r["status"] != "candidate");  // the one before was promoted, then maybe retired

    auto metrics = httplib::Client("127.0.0.1", d.api_port).Get("/metrics");
    REQUIRE(metrics);
    CHECK_THAT(metrics->body, Catch::Contains("anvil_reconcile_passes_total"));
    CHECK_THAT(metrics->body, Catch::Contains("anvil_api_requests_total{route=\"/api/v1/recipes\",code=\"200\"}"));
    d.stop();
    check_ledger(d);
}

TEST_CASE("anvild killed with SIGKILL in the middle of work restarts with nothing lost or duplicated", "[daemon][e2e]") {
    Daemon d;
    EngineGate gate(d);
    d.repo.write("recipes/tiny-f32.json", embedded_recipe("tiny-f32", "f32", d.digest));
    d.repo.commit("f32");
    d.start();
    REQUIRE(eventually([&] { return d.status_of("tiny-f32") == "promoted" && d.serving() == "tiny-f32"; }, 120s));
    const json engines_before = d.get("/api/v1/engines").second["data"];
    REQUIRE(engines_before.size() == 1);

    // A new recipe arrives; the daemon dies while qualifying it (its engine held back from starting:
    // the tiny model qualifies in a fraction of a second, too fast to catch otherwise).
    gate.hold();
    d.repo.write("recipes/tiny-bf16.json", embedded_recipe("tiny-bf16", "bf16", d.digest));
    d.repo.commit("bf16");
    d.post("/api/v1/registry/sync", "");
    REQUIRE(eventually([&] { return d.status_of("tiny-bf16") == "qualifying" && gate.alive() == 2; }, 30s));
    CHECK(d.get("/api/v1/status").second["qualifying"].is_number());
    d.kill();

    gate.release();
    d.start();
    // The serving engine was adopted, not started twice; the qualification started over and ended.
    REQUIRE(eventually([&] { auto s = d.status_of("tiny-bf16"); return s == "validated" || s == "promoted" || s == "failed"; }, 120s));
    const json engines_after = d.get("/api/v1/engines").second["data"];
    std::size_t serving = 0;
    for (const auto& e : engines_after) serving += e["role"] == "serving";
    CHECK(serving == 1);
    bool adopted = false;
    for (const auto& e : engines_after) adopted = adopted || e["engine_id"] == engines_before[0]["engine_id"];
    CHECK(adopted);
    auto bf16 = d.get("/api/v1/recipes/tiny-bf16").second["data"];
    CHECK(bf16["revisions"].size() == 1);
    d.stop();
    check_ledger(d);
}

TEST_CASE("a new default that cannot serve is rolled back to the previous default, and promotion freezes", "[daemon][e2e]") {
    Daemon d("manual");
    fs::copy(d.dir / "models" / "tiny", d.dir / "models" / "tiny-copy", fs::copy_options::recursive);
    json q8 = json::parse(embedded_recipe("tiny-q8", "q8", d.digest));
    q8["launch"]["model"]["path"] = "${MODEL_ROOT}/tiny-copy";
    d.repo.write("recipes/tiny-f32.json", embedded_recipe("tiny-f32", "f32", d.digest));
    d.repo.write("recipes/tiny-q8.json", q8.dump(2));
    d.repo.commit("two recipes");
    d.start();
    // Manual policy: both are qualified, neither is promoted until someone pins one.
    REQUIRE(eventually([&] { return d.status_of("tiny-f32") == "validated" && d.status_of("tiny-q8") == "validated"; }, 120s));
    CHECK(d.get("/api/v1/default").second["data"].is_null());
    REQUIRE(d.cli({"pin", "tiny-f32"}).exit_code == 0);
    REQUIRE(eventually([&] { return d.serving() == "tiny-f32"; }, 60s));

    // q8's weights change on disk after it was validated: its pinned digest no longer matches, so
    // it cannot start once it is the default.
    anvil::test::write_file(d.dir / "models" / "tiny-copy" / "generation_config.json", "{\"changed\": true}");
    REQUIRE(d.cli({"pin", "tiny-q8"}).exit_code == 0);
    REQUIRE(eventually([&] { return d.status_of("tiny-f32") == "promoted" && d.status_of("tiny-q8") == "retired"; }, 90s));
    REQUIRE(eventually([&] { return d.serving() == "tiny-f32"; }, 60s));
    auto history = d.get("/api/v1/recipes/tiny-f32/history").second["data"];
    CHECK_THAT(history.back()["reason"].get<std::string>(), Catch::StartsWith("rollback: "));
    CHECK(history.back()["actor"] == "reconciler");
    auto status = d.get("/api/v1/status").second;
    CHECK(status["policy"]["frozen"] == true);
    CHECK(status["policy"]["pinned"].is_null());
    d.stop();
}

TEST_CASE("SIGHUP reloads the configuration: a broken one is refused and the running one kept", "[daemon][e2e]") {
    Daemon d;
    d.repo.write("recipes/tiny-f32.json", embedded_recipe("tiny-f32", "f32", d.digest));
    d.repo.commit("f32");
    d.start();
    REQUIRE(eventually([&] { return d.serving() == "tiny-f32"; }, 120s));
    CHECK(d.get("/api/v1/status").second["policy"]["mode"] == "auto");

    json config = json::parse(anvil::test::read_file(d.dir / "anvild.json"));
    config["promotion"]["policy"] = "manual";
    anvil::test::write_file(d.dir / "anvild.json", config.dump(2));
    d.process->kill(SIGHUP);
    REQUIRE(eventually([&] { return d.get("/api/v1/status").second["policy"]["mode"] == "manual"; }, 30s));
    CHECK(d.serving() == "tiny-f32");  // the default's engine was adopted, not restarted away

    anvil::test::write_file(d.dir / "anvild.json", "{\"promotion\": {\"policy\": \"sometimes\"}}");
    d.process->kill(SIGHUP);
    std::this_thread::sleep_for(2s);
    REQUIRE(eventually([&] { return d.get("/readyz").first == 200; }, 30s));
    CHECK(d.get("/api/v1/status").second["policy"]["mode"] == "manual");
    CHECK(d.serving() == "tiny-f32");
    d.stop();
    check_ledger(d);
}

TEST_CASE("SIGTERM does not wait for a qualification: it is cut short, its engine stopped, and it stays qualifying", "[daemon][e2e]") {
    Daemon d;
    // An engine binary that never answers: the qualification waits on its readiness, for ten
    // minutes if nothing calls it off.
    const auto never_ready = d.dir / "never-ready.sh";
    anvil::test::write_file(never_ready, "#!/bin/sh\nexec sleep 600\n");
    fs::permissions(never_ready, fs::perms::owner_all);
    json config = json::parse(anvil::test::read_file(d.dir / "anvild.json"));
    config["engine_binary"] = never_ready.string();
    config["engine_ready_timeout_seconds"] = 600;
    anvil::test::write_file(d.dir / "anvild.json", config.dump(2));
    d.repo.write("recipes/tiny-f32.json", embedded_recipe("tiny-f32", "f32", d.digest));
    d.repo.commit("one recipe");
    d.start();
    REQUIRE(eventually([&] { return d.status_of("tiny-f32") == "qualifying"; }, 60s));
    REQUIRE(eventually([&] { return !d.get("/api/v1/engines").second["data"].empty(); }, 30s));

    const auto asked = std::chrono::steady_clock::now();
    d.stop();  // SIGTERM, and exit code 0
    CHECK(std::chrono::steady_clock::now() - asked < 20s);

    check_ledger(d);  // whole, and the never-ready engine is recorded as stopped
    anvil::state::Store store(d.dir / "data" / "anvil.db");
    const auto latest = store.latest_revisions();
    REQUIRE(latest.count("tiny-f32"));
    CHECK(latest.at("tiny-f32").second == anvil::state::Status::qualifying);
    bool cut_short = false;
    for (const auto& item : store.feed_since({}, 1000))
        cut_short = cut_short || (item.kind == "qualification" && item.message.find("cut short") != std::string::npos);
    CHECK(cut_short);
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

TEST_CASE("two engines that cannot run together: qualification waits for the window, pauses the default inside it, restores it", "[daemon][e2e]") {
    Daemon d;
    // One GPU declared, recipes that each want one: the candidate and the default cannot run side
    // by side. The declared GPU is no device, so the engine named in the configuration drops the
    // --device anvil gives a GPU recipe's engine and computes on the CPU.
    const fs::path engine = d.dir / "engine-on-the-cpu.sh";
    anvil::test::write_file(engine, "#!/bin/sh\nskip=0\nfor a do\n  shift\n  if [ $skip = 1 ]; then skip=0; continue; fi\n"
                                    "  if [ \"$a\" = --device ]; then skip=1; continue; fi\n  set -- \"$@\" \"$a\"\ndone\nexec '" +
                                        std::string(ANVIL_ENGINE) + "' \"$@\"\n");
    fs::permissions(engine, fs::perms::owner_all);
    json config = json::parse(anvil::test::read_file(d.dir / "anvild.json"));
    config["engine_binary"] = engine.string();
    config["inventory"] = {{"gpus", {{{"uuid", "GPU-00000000-0000-0000-0000-000000000001"}, {"name", "test GPU"}, {"memory_mib", 81920}, {"idle_used_mib", 0}}}}};
    const std::string later = clock_in(120) + "-" + clock_in(180);  // not now
    config["promotion"]["exclusive_window"] = later;
    anvil::test::write_file(d.dir / "anvild.json", config.dump(2));
    auto on_gpu = [&](const std::string& id, const std::string& weights) {
        json r = json::parse(embedded_recipe(id, weights, d.digest));
        r["hardware_id"] = "test-gpu";
        return r.dump(2);
    };
    d.repo.write("recipes/gpu-f32.json", on_gpu("gpu-f32", "f32"));
    d.repo.commit("f32 on the GPU");
    d.start();
    REQUIRE(eventually([&] { return d.serving() == "gpu-f32"; }, 120s));

    d.repo.write("recipes/gpu-q8.json", on_gpu("gpu-q8", "q8"));
    d.repo.commit("q8 on the GPU");
    d.post("/api/v1/registry/sync", "");
    auto qualification = [&] {
        const json status = d.get("/api/v1/status").second;
        if (status.is_object())
            for (const auto& c : status["conditions"])
                if (c["type"] == "Qualification") return c;
        return json::object();
    };
    REQUIRE(eventually([&] { return qualification().value("reason", "") == "OutsideExclusiveWindow"; }, 60s));
    CHECK_THAT(qualification()["message"].get<std::string>(), Catch::Contains("gpu-q8") && Catch::Contains(later));
    std::this_thread::sleep_for(2s);
    CHECK(d.status_of("gpu-q8") == "candidate");
    CHECK(d.serving() == "gpu-f32");

    // The window opens (a reload with a window around now): the default is paused, the candidate
    // qualified, and the default serves again whatever the outcome.
    config["promotion"]["exclusive_window"] = clock_in(-60) + "-" + clock_in(60);
    anvil::test::write_file(d.dir / "anvild.json", config.dump(2));
    d.process->kill(SIGHUP);
    REQUIRE(eventually([&] { auto s = d.status_of("gpu-q8"); return s == "validated" || s == "promoted" || s == "failed"; }, 120s));
    REQUIRE(eventually([&] { return !d.serving().empty(); }, 60s));
    CHECK(d.serving() == d.get("/api/v1/default").second["data"]["recipe_id"]);
    auto said = [&](const std::string& what) {
        const json events = d.get("/api/v1/events?limit=1000").second;
        if (!events.is_object()) return false;
        for (const auto& e : events["data"])
            if (e["kind"] == "qualification" && e["message"].get<std::string>().find(what) != std::string::npos) return true;
        return false;
    };
    CHECK(said("paused inside the exclusive window"));
    REQUIRE(eventually([&] { return said("the default serves again"); }, 30s));
    d.stop();
    check_ledger(d);
}

#endif
