// The controller's behaviours, one reconcile pass at a time, in milliseconds: a real ledger (SQLite
// file) and a real registry directory, with the engines, the stable endpoint, the qualification
// runner and the clock replaced by fakes the test drives. Fidelity order, first default, promotion
// over a control, a pin as intent, start backoff, rollback during probation, the exclusive window,
// and reads that answer while a drain is held open. What only real engines can show stays in the
// end-to-end tests (test_daemon_e2e.cpp).
#include <atomic>
#include <future>
#include <set>
#include <thread>

#include <sqlite3.h>

#include <catch2/catch.hpp>

#include "daemon/anvild/api_views.hpp"
#include "daemon/controller/reconciler.hpp"
#include "daemon_fixture.hpp"
#include "state/gate_table.hpp"
#include "support/clock.hpp"
#include "test_support.hpp"

using namespace anvil;
using namespace std::chrono_literals;
using json = nlohmann::json;
using state::Status;

namespace {

class FakeFleet final : public drivers::EngineFleet {
public:
    std::filesystem::path model_dir;
    std::set<std::string> cannot_start;     // recipe ids whose start throws
    std::set<std::string> not_startable;    // recipe ids startable() refuses
    bool answering = true;
    std::vector<std::pair<state::Id, drivers::EngineRole>> started;
    std::vector<state::Id> stopped;
    std::vector<drivers::RunningEngine> exited;  // returned by the next check()

    std::optional<std::string> unsupported(const registry::Recipe&) const override { return std::nullopt; }
    std::optional<std::string> startable(const registry::Recipe& recipe) const override {
        if (not_startable.count(recipe.id)) return "model directory has another digest";
        return std::nullopt;
    }
    std::filesystem::path model_directory(const registry::ModelRef&, const std::string&) const override { return model_dir; }
    drivers::RunningEngine start(state::Id revision_id, const registry::Recipe& recipe, drivers::EngineRole role,
                                const std::atomic<bool>*) override {
        started.emplace_back(revision_id, role);
        if (cannot_start.count(recipe.id)) throw drivers::EngineError("engine " + recipe.id + " exited before it was ready");
        drivers::RunningEngine e;
        e.row_id = ++next_id_;
        e.revision_id = revision_id;
        e.role = role;
        e.handle.engine_id = recipe.id + "-" + std::to_string(e.row_id);
        e.handle.recipe = {recipe.id, std::to_string(revision_id)};
        e.handle.host = "127.0.0.1";
        e.handle.port = 30000 + static_cast<int>(e.row_id);
        e.handle.served_model_name = recipe.id;
        std::lock_guard lock(mutex_);
        running_.push_back(e);
        return e;
    }
    void stop(const drivers::RunningEngine& engine, std::chrono::milliseconds) override {
        stopped.push_back(engine.revision_id);
        std::lock_guard lock(mutex_);
        std::erase_if(running_, [&](const auto& e) { return e.row_id == engine.row_id; });
    }
    std::optional<std::string> check_fails;  // check() throws this while set
    std::vector<drivers::RunningEngine> check() override {
        if (check_fails) throw std::runtime_error(*check_fails);
        std::lock_guard lock(mutex_);
        for (const auto& gone : exited) std::erase_if(running_, [&](const auto& e) { return e.row_id == gone.row_id; });
        return std::exchange(exited, {});
    }
    void adopt() override {}
    // A cluster that does not answer at start-up: `awaiting` says why a serving engine may still
    // run there; `late` is what adoption finds once it answers.
    std::optional<std::string> awaiting;
    std::vector<drivers::RunningEngine> late;
    std::vector<drivers::RunningEngine> adopt_pending() override {
        if (awaiting) return {};
        std::lock_guard lock(mutex_);
        for (const auto& e : late) running_.push_back(e);
        return std::exchange(late, {});
    }
    std::optional<std::string> awaiting_adoption(drivers::EngineRole role) const override {
        return role == drivers::EngineRole::serving ? awaiting : std::nullopt;
    }
    // Forgets every engine, as a new anvild starts knowing none; returns them.
    std::vector<drivers::RunningEngine> forget() {
        std::lock_guard lock(mutex_);
        return std::exchange(running_, {});
    }
    bool answers(const drivers::RunningEngine&) const override { return answering; }
    // The fake starts nothing, so an engine's log is what the fake says it did.
    std::string logs(const drivers::RunningEngine& engine, std::size_t) const override { return "fake engine " + engine.handle.engine_id + "\n"; }
    std::vector<drivers::RunningEngine> engines() const override {
        std::lock_guard lock(mutex_);
        return running_;
    }
    std::vector<drivers::RunningEngine> serving() const {
        std::vector<drivers::RunningEngine> out;
        for (const auto& e : engines())
            if (e.role == drivers::EngineRole::serving) out.push_back(e);
        return out;
    }

private:
    mutable std::mutex mutex_;
    std::vector<drivers::RunningEngine> running_;
    state::Id next_id_ = 0;
};

class FakeEndpoint final : public endpoint::UpstreamSwitch {
public:
    std::vector<std::optional<endpoint::Upstream>> switches;
    std::function<void()> during_switch;  // runs inside switch_to: a drain held open

    endpoint::SwitchResult switch_to(std::optional<endpoint::Upstream> next) override {
        if (during_switch) during_switch();
        std::lock_guard lock(mutex_);
        switches.push_back(next);
        current_ = std::move(next);
        return {};
    }
    std::optional<endpoint::Upstream> current() const override {
        std::lock_guard lock(mutex_);
        return current_;
    }

private:
    mutable std::mutex mutex_;
    std::optional<endpoint::Upstream> current_;
};

class FakeQualifications final : public daemon::Qualifications {
public:
    std::optional<daemon::QualificationJob> job;
    std::vector<std::string> ran;  // recipe ids, in order

    bool busy() const override { return job.has_value(); }
    std::optional<state::Id> current() const override { return job ? std::optional(job->revision_id) : std::nullopt; }
    void run(daemon::QualificationJob j, std::function<void()>) override {
        ran.push_back(j.recipe.id);
        job = std::move(j);
    }
    void withdraw(state::Id, const std::string&) override {}
    void cancel_and_wait() override {}
};

class FakeClock final : public daemon::Clock {
public:
    std::chrono::steady_clock::time_point steady_now = std::chrono::steady_clock::time_point{} + 24h;
    std::chrono::system_clock::time_point system_now = std::chrono::system_clock::now();
    int minute = 12 * 60;
    std::chrono::steady_clock::time_point steady() const override { return steady_now; }
    std::chrono::system_clock::time_point system() const override { return system_now; }
    int local_minute_of_day() const override { return minute; }
    void advance(std::chrono::seconds by) {
        steady_now += by;
        system_now += by;
    }
};

struct ControllerMeasured {
    double warm_e2e_seconds = 10.0;
    double tasks_per_hour = 1440.0;
    double relative_quality_loss = 0.0;
};

using Recipes = std::vector<std::pair<std::string, std::string>>;  // recipe id, weights

// One controller over a real ledger and registry directory, acting through the fakes above.
struct World {
    test::TempDir dir;
    FakeFleet fleet;
    FakeEndpoint endpoint;
    FakeQualifications qualifications;
    FakeClock clock;
    daemon::DaemonConfig config;
    std::unique_ptr<state::Store> store;
    daemon::DaemonMetrics metrics;
    std::unique_ptr<daemon::Reconciler> reconciler;

    explicit World(const Recipes& recipes, json extra = json::object(), const std::function<void(json&)>& edit = {}) {
        fleet.model_dir = dir / "models" / "tiny";
        for (const auto& [id, weights] : recipes) write_recipe(id, weights);
        json c = {{"sources", {{{"name", "test"}, {"url", (dir / "registry").string()}}}},
                  {"data_dir", (dir / "data").string()},
                  {"model_root", (dir / "models").string()},
                  {"inventory", "none"},
                  {"requirements",
                   {{"tokens", {{"prompt", {{"value", 256}, {"unit", "tokens"}, {"status", "assumed"}, {"source", "test"}, {"observed_at", "2026-11-30"}}}}},
                    {"concurrency", {{"value", 1}, {"unit", "sequences"}, {"status", "assumed"}, {"source", "test"}, {"observed_at", "2026-11-30"}}},
                    {"physical_vram_bytes", {{"value", 0}, {"unit", "bytes"}, {"status", "measured"}, {"source", "test"}, {"observed_at", "2026-11-30"}}},
                    {"thresholds", json::object()}}},
                  {"promotion", {{"policy", "auto"}, {"min_interval_seconds", 0}, {"attempts", 1}, {"warm_e2e_min_seconds", 0}}}};
        c.merge_patch(extra);
        if (edit) edit(c);
        config = daemon::parse_config(c.dump(), dir / "anvild.json");
        store = std::make_unique<state::Store>(dir / "state.db");
        reconciler = std::make_unique<daemon::Reconciler>(config, *store, daemon::ControllerPorts{fleet, endpoint, qualifications, clock}, metrics);
        reconciler->start_up();
    }

    void write_recipe(const std::string& id, const std::string& weights, const std::function<void(json&)>& edit = {}) {
        json r = json::parse(test::daemon::embedded_recipe(id, weights, "sha256:" + std::string(64, 'a')));
        if (edit) edit(r);
        test::write_file(dir / "registry" / "recipes" / (id + ".json"), r.dump(2));
    }

    void pass() {
        reconciler->requests().request_sync();  // a directory source is read again each pass
        reconciler->pass();
    }
    std::string status_of(const std::string& recipe_id) const {
        const auto detail = store->recipe(recipe_id);
        return detail ? std::string(state::to_string(detail->revisions.front().status)) : "absent";
    }
    std::optional<std::string> default_recipe() const {
        const auto d = store->current_default();
        return d ? std::optional(d->recipe_id) : std::nullopt;
    }
    std::string condition(const std::string& type) const {
        const auto all = reconciler->conditions();
        const auto it = all.find(type);
        return it == all.end() ? "" : it->second.reason;
    }
    // The running qualification ends as the runner would record it: every gate passed, the
    // measurements taken, compared with the control it was given.
    void finish_qualification(const ControllerMeasured& m) {
        REQUIRE(qualifications.job);
        const auto& job = *qualifications.job;
        state::QualificationRecord record;
        record.revision_id = job.revision_id;
        record.to = Status::validated;
        record.reason = "passed every hard gate";
        auto evidence = [&](const std::string& metric, double value) {
            state::EvidenceRow row;
            row.metric = metric;
            row.min = row.max = registry::Number(value);
            row.unit = "s";
            row.source = "test";
            row.observed_at = "2026-12-01T00:00:00Z";
            row.control_revision_id = job.control_revision;
            record.evidence.push_back(row);
            return record.evidence.size() - 1;
        };
        evidence("warm_e2e_seconds", m.warm_e2e_seconds);
        evidence("tasks_per_hour", m.tasks_per_hour);
        if (job.control_revision) evidence("relative_quality_loss", m.relative_quality_loss);
        for (const auto& gate : state::default_hard_gates()) record.verdicts.push_back({gate, state::GateResult::pass, std::nullopt, {}, {evidence("gate_pass_rate:" + gate, 1.0)}});
        store->record_qualification(record);
        qualifications.job.reset();
    }
    // Passes until nothing waits for qualification, finishing each with `measured(recipe id)`.
    void qualify_all(const std::function<ControllerMeasured(const std::string&)>& measured) {
        for (int i = 0; i < 10; ++i) {
            pass();
            if (!qualifications.job) return;
            finish_qualification(measured(qualifications.job->recipe.id));
        }
        FAIL("qualification did not settle");
    }
};

ControllerMeasured speed(double e2e) { return {e2e, 3600.0 * 4 / e2e, 0.0}; }

}  // namespace

TEST_CASE("controller: candidates are qualified most faithful first: the best becomes the first default and serves", "[controller]") {
    World w(Recipes{{"tiny-q8", "q8"}, {"tiny-f32", "f32"}, {"tiny-bf16", "bf16"}});
    w.pass();
    REQUIRE(w.qualifications.ran == std::vector<std::string>{"tiny-f32"});
    CHECK(w.status_of("tiny-f32") == "qualifying");
    CHECK(w.status_of("tiny-q8") == "candidate");
    w.finish_qualification(speed(10.0));
    w.pass();  // f32 becomes the first default, serves, and bf16 is qualified against it
    CHECK(w.default_recipe() == "tiny-f32");
    REQUIRE(w.fleet.serving().size() == 1);
    REQUIRE(w.endpoint.current());
    CHECK(w.endpoint.current()->recipe_id == "tiny-f32");
    CHECK(w.condition("DefaultServing") == "Serving");
    REQUIRE(w.qualifications.job);
    CHECK(w.qualifications.job->recipe.id == "tiny-bf16");
    CHECK(w.qualifications.job->control_revision == w.store->current_default()->id);
}

TEST_CASE("controller: each validated candidate is decided against the default it was measured with", "[controller]") {
    struct Row {
        const char* name;
        double bf16_e2e, q8_e2e;
        std::string default_after;
        std::string promoted_because;  // the reason its promotion was recorded with
    };
    const std::vector<Row> rows{
        {"neither beats the default by the margin", 9.0, 9.5, "tiny-f32", "first default: the best validated candidate"},
        {"one beats it", 7.0, 9.5, "tiny-bf16", "beat the default tiny-f32"},
        // q8 is qualified after bf16 became the default, so it is measured against bf16, and beats it too.
        {"each beats the one before it: the default moves on", 7.0, 5.0, "tiny-q8", "beat the default tiny-bf16"},
    };
    for (const auto& row : rows) {
        DYNAMIC_SECTION(row.name) {
            World w(Recipes{{"tiny-f32", "f32"}, {"tiny-bf16", "bf16"}, {"tiny-q8", "q8"}});
            w.qualify_all([&](const std::string& id) { return speed(id == "tiny-f32" ? 10.0 : id == "tiny-bf16" ? row.bf16_e2e : row.q8_e2e); });
            w.pass();
            CHECK(w.default_recipe() == row.default_after);
            CHECK_THAT(w.store->recipe(row.default_after)->history.back().reason, Catch::StartsWith(row.promoted_because));
            w.pass();
            // The old default's engine is stopped once the endpoint forwards to the new one.
            REQUIRE(w.fleet.serving().size() == 1);
            CHECK(w.endpoint.current()->recipe_id == row.default_after);
        }
    }
}

TEST_CASE("controller: a candidate measured against an earlier default is held as inconclusive", "[controller]") {
    World w(Recipes{{"tiny-f32", "f32"}});
    w.qualify_all([](const std::string&) { return speed(10.0); });
    w.pass();
    REQUIRE(w.default_recipe() == "tiny-f32");
    // q8 appears; its record says it was compared with a revision other than the default.
    w.write_recipe("tiny-q8", "q8");
    w.pass();
    REQUIRE(w.qualifications.job);
    w.qualifications.job->control_revision = w.qualifications.job->revision_id;  // any revision but the default
    w.finish_qualification(speed(5.0));
    w.pass();
    CHECK(w.default_recipe() == "tiny-f32");
    CHECK(w.condition("Promotion") == "Holding");
    CHECK_THAT(w.reconciler->conditions().at("Promotion").message, Catch::Contains("inconclusive"));
}

TEST_CASE("controller: a pin is recorded by the request and carried out by the pass: unpin hands back to the policy", "[controller]") {
    World w(Recipes{{"tiny-f32", "f32"}, {"tiny-bf16", "bf16"}});
    w.qualify_all([](const std::string& id) { return speed(id == "tiny-f32" ? 10.0 : 9.9); });
    w.pass();
    REQUIRE(w.default_recipe() == "tiny-f32");
    REQUIRE(w.status_of("tiny-bf16") == "validated");

    w.reconciler->requests().pin("tiny-bf16", "api:abcd1234");
    CHECK(w.default_recipe() == "tiny-f32");  // the request promoted nothing itself
    w.pass();
    CHECK(w.default_recipe() == "tiny-bf16");
    CHECK(w.condition("Promotion") == "Pinned");
    const auto history = w.store->recipe("tiny-bf16")->history;
    CHECK(history.back().actor == "api:abcd1234");
    CHECK(history.back().reason == "pinned as the default by api:abcd1234");
    w.pass();
    CHECK(w.endpoint.current()->recipe_id == "tiny-bf16");

    // A pinned recipe is kept whatever the measurements; unpinned, f32 does not win back (it is
    // not measured against bf16), so bf16 stays.
    // Refusals in the domain's terms (the API maps them to 404 and 409).
    auto refused = [](const std::function<void()>& request) -> std::optional<daemon::RequestRefused::Why> {
        try {
            request();
        } catch (const daemon::RequestRefused& e) {
            return e.why;
        }
        return std::nullopt;
    };
    CHECK(refused([&] { w.reconciler->requests().pin("nope", "api:abcd1234"); }) == daemon::RequestRefused::Why::not_found);
    w.reconciler->requests().pin(std::nullopt, "api:abcd1234");
    CHECK(refused([&] { w.reconciler->requests().pin(std::nullopt, "api:abcd1234"); }) == daemon::RequestRefused::Why::conflict);
    w.pass();
    CHECK(w.default_recipe() == "tiny-bf16");
}

TEST_CASE("controller: freeze and the manual policy hold a winner: unfreeze lets it through", "[controller]") {
    SECTION("freeze") {
        World w(Recipes{{"tiny-f32", "f32"}, {"tiny-q8", "q8"}});
        w.pass();
        w.finish_qualification(speed(10.0));
        w.pass();
        REQUIRE(w.default_recipe() == "tiny-f32");
        w.reconciler->requests().freeze("maintenance", "api:abcd1234");
        w.finish_qualification(speed(5.0));
        w.pass();
        CHECK(w.default_recipe() == "tiny-f32");
        CHECK(w.condition("Promotion") == "Frozen");
        w.reconciler->requests().unfreeze("api:abcd1234");
        w.pass();
        CHECK(w.default_recipe() == "tiny-q8");
    }
    SECTION("manual") {
        World w(Recipes{{"tiny-f32", "f32"}}, {{"promotion", {{"policy", "manual"}}}});
        w.qualify_all([](const std::string&) { return speed(10.0); });
        w.pass();
        CHECK_FALSE(w.default_recipe());
        CHECK(w.condition("Promotion") == "Manual");
        w.reconciler->requests().pin("tiny-f32", "api:abcd1234");
        w.pass();
        CHECK(w.default_recipe() == "tiny-f32");
    }
}

TEST_CASE("controller: a default that cannot start is retried with backoff, and rolled back within its probation", "[controller]") {
    World w(Recipes{{"tiny-f32", "f32"}, {"tiny-q8", "q8"}});
    w.fleet.cannot_start.insert("tiny-q8");  // its qualification passed; as the default it will not start
    auto starts_of_q8 = [&] {
        const auto q8 = w.store->recipe("tiny-q8")->revisions.front().id;
        int n = 0;
        for (const auto& [revision, role] : w.fleet.started) n += revision == q8;
        return n;
    };
    w.qualify_all([](const std::string& id) { return speed(id == "tiny-f32" ? 10.0 : 5.0); });
    REQUIRE(w.default_recipe() == "tiny-q8");  // promoted over f32, and its first start failed
    CHECK(starts_of_q8() == 1);
    CHECK(w.condition("DefaultServing") == "EngineFailed");
    w.pass();  // inside the backoff: no second start
    CHECK(starts_of_q8() == 1);
    w.clock.advance(3s);
    w.pass();
    CHECK(starts_of_q8() == 2);
    w.clock.advance(5s);
    w.pass();  // the third failure inside the probation rolls back to f32 and freezes promotion
    CHECK(w.default_recipe() == "tiny-f32");
    CHECK(w.store->recipe("tiny-f32")->history.back().reason.starts_with("rollback: "));
    CHECK(w.store->freeze());
    w.pass();
    CHECK(w.endpoint.current()->recipe_id == "tiny-f32");
    CHECK(w.default_recipe() == "tiny-f32");  // frozen: q8 does not win again
}

TEST_CASE("controller: a step that throws is named in a condition, and the steps that do not need it still run", "[controller]") {
    World w(Recipes{{"tiny-f32", "f32"}});
    w.fleet.check_fails = "the fleet cannot be asked";
    w.pass();  // the engines step fails; the registry, promotion and qualification steps run
    CHECK(w.status_of("tiny-f32") == "qualifying");
    CHECK(w.qualifications.ran == std::vector<std::string>{"tiny-f32"});
    CHECK(w.condition("Reconciling") == "StepFailed");
    CHECK_THAT(w.reconciler->conditions().at("Reconciling").message, Catch::Contains("engines step: the fleet cannot be asked"));
    const json steps = w.reconciler->last_pass()["steps"];
    CHECK(steps["engines_ms"] == "failed: the fleet cannot be asked");
    CHECK(steps["qualification_ms"].is_number());
    w.fleet.check_fails.reset();
    w.finish_qualification(speed(10.0));
    w.pass();
    CHECK(w.condition("Reconciling") == "EveryStepRan");
    CHECK(w.default_recipe() == "tiny-f32");
}

TEST_CASE("controller: after an incremental commit the retire step looks only at the recipes it touched", "[controller]") {
    test::TempDir registry_dir;
    test::GitRepo repo(registry_dir / "registry");
    const std::string digest = "sha256:" + std::string(64, 'a');
    for (const std::string id : {"tiny-f32", "tiny-bf16", "tiny-q8"})
        repo.write("recipes/" + id + ".json", test::daemon::embedded_recipe(id, id.substr(5), digest));
    repo.commit("three recipes");
    World w(Recipes{}, json{{"sources", {{{"name", "test"}, {"url", repo.dir().string()}}}}});
    w.pass();  // the first read is whole: every head is looked at
    CHECK(w.reconciler->last_pass()["steps"]["retire_heads"] == 3);
    w.pass();  // nothing new: nothing to look at
    CHECK_FALSE(w.reconciler->last_pass()["steps"].contains("retire_heads"));

    // One document made unusable and one removed: exactly those two are looked at, and retired.
    repo.write("recipes/tiny-bf16.json", "{\"kind\": \"recipe\", \"id\": \"tiny-bf16\"}");
    repo.git({"rm", "-q", "recipes/tiny-q8.json"});
    repo.commit("bf16 broken, q8 gone");
    w.pass();
    CHECK(w.reconciler->last_pass()["steps"]["retire_heads"] == 2);
    CHECK(w.status_of("tiny-bf16") == "retired");
    CHECK(w.status_of("tiny-q8") == "retired");
    CHECK(w.status_of("tiny-f32") != "retired");
    w.pass();
    CHECK_FALSE(w.reconciler->last_pass()["steps"].contains("retire_heads"));
}

TEST_CASE("controller: the fake clock alone moves the registry's polls and the minimum interval, and stamps what is stored",
          "[controller][clock]") {
    World w(Recipes{{"tiny-f32", "f32"}}, json{{"promotion", {{"min_interval_seconds", 600}}}},
            [](json& c) { c["sources"][0]["poll_interval_seconds"] = 60; });
    w.reconciler->pass();  // the first read, due at once
    REQUIRE(w.qualifications.job);
    w.finish_qualification(speed(10.0));
    w.clock.advance(3600s);  // an hour on the fake clock alone: the stored times must follow it
    w.reconciler->pass();    // the first default: no interval applies to it
    REQUIRE(w.default_recipe() == "tiny-f32");
    // Stored times are the clock's: the promotion and the condition it set.
    const auto promoted_at = anvil::support::parse_utc(w.store->last_promotion()->at);
    REQUIRE(promoted_at);
    CHECK(std::chrono::abs(*promoted_at - w.clock.system_now) < 1s);
    const auto history = w.store->recipe("tiny-f32")->history;
    CHECK(anvil::support::parse_utc(history.back().created_at) == anvil::support::parse_utc(w.store->last_promotion()->at));

    // A new, faster recipe: not seen until the poll interval has passed on the fake clock.
    w.write_recipe("tiny-bf16", "bf16");
    w.clock.advance(30s);
    w.reconciler->pass();
    CHECK(w.status_of("tiny-bf16") == "absent");
    w.clock.advance(31s);
    w.reconciler->pass();
    CHECK(w.status_of("tiny-bf16") == "qualifying");
    w.finish_qualification(speed(5.0));
    w.reconciler->pass();  // it wins, but the last promotion was 61 s ago: held
    CHECK(w.default_recipe() == "tiny-f32");
    CHECK(w.condition("Promotion") == "Holding");
    CHECK_THAT(w.reconciler->conditions().at("Promotion").message, Catch::Contains("minimum interval"));
    w.clock.advance(540s);
    w.reconciler->pass();  // 601 s: promoted
    CHECK(w.default_recipe() == "tiny-bf16");
    CHECK(anvil::support::parse_utc(w.reconciler->conditions().at("Promotion").since) ==
          std::chrono::time_point_cast<std::chrono::milliseconds>(w.clock.system_now));
}

TEST_CASE("controller: a default past its probation is retried, never rolled back", "[controller]") {
    World w(Recipes{{"tiny-f32", "f32"}, {"tiny-q8", "q8"}});
    w.qualify_all([](const std::string& id) { return speed(id == "tiny-f32" ? 10.0 : 5.0); });
    w.pass();
    w.pass();
    REQUIRE(w.endpoint.current()->recipe_id == "tiny-q8");
    w.clock.advance(std::chrono::hours(1));
    // Its engine exits, and will not start again.
    w.fleet.exited = w.fleet.serving();
    w.fleet.cannot_start.insert("tiny-q8");
    for (int i = 0; i < 5; ++i) {
        w.pass();
        w.clock.advance(120s);
    }
    CHECK(w.default_recipe() == "tiny-q8");
    CHECK(w.condition("DefaultServing") == "EngineFailed");
    CHECK(w.metrics.render("").find("anvil_engine_restarts_total 1\n") != std::string::npos);
}

TEST_CASE("controller: a serving engine left where the fleet cannot reach yet is waited for and adopted, never started twice",
          "[controller]") {
    World w(Recipes{{"tiny-f32", "f32"}});
    w.qualify_all([](const std::string&) { return speed(10.0); });
    w.pass();
    REQUIRE(w.fleet.serving().size() == 1);
    REQUIRE(w.fleet.started.size() == 1);  // the default's (the fake runner starts no engine)
    // anvild restarts while slurmrestd is down: its serving job runs on, out of sight.
    auto left = w.fleet.forget();
    w.fleet.awaiting = "engine e1 (Slurm job 7) of an earlier run may still be serving, and cannot be adopted yet: slurmrestd refused";
    w.endpoint.switch_to(std::nullopt);
    w.reconciler = std::make_unique<daemon::Reconciler>(w.config, *w.store, daemon::ControllerPorts{w.fleet, w.endpoint, w.qualifications, w.clock},
                                                        w.metrics);
    w.reconciler->start_up();
    for (int i = 0; i < 3; ++i) {
        w.pass();
        w.clock.advance(60s);
    }
    CHECK(w.fleet.started.size() == 1);
    CHECK(w.condition("DefaultServing") == "AwaitingAdoption");
    CHECK_FALSE(w.endpoint.current());
    // The cluster answers: the same engine is adopted and served; nothing new starts.
    w.fleet.awaiting.reset();
    w.fleet.late = left;
    w.pass();
    CHECK(w.fleet.started.size() == 1);
    REQUIRE(w.endpoint.current());
    CHECK(w.endpoint.current()->engine_id == left[0].handle.engine_id);
    CHECK(w.condition("DefaultServing") == "Serving");
}

TEST_CASE("controller: a winner whose default could not come back is not promoted", "[controller]") {
    World w(Recipes{{"tiny-f32", "f32"}, {"tiny-q8", "q8"}});
    w.pass();
    w.finish_qualification(speed(10.0));
    w.pass();
    w.finish_qualification(speed(5.0));
    w.fleet.not_startable.insert("tiny-f32");
    w.pass();
    CHECK(w.default_recipe() == "tiny-f32");
    CHECK(w.condition("Promotion") == "RollbackUnavailable");
}

TEST_CASE("controller: two GPU recipes that cannot run together are qualified only inside the exclusive window", "[controller]") {
    auto gpu = [](json& r) {
        r["hardware_id"] = "h200";
        r["hardware_count"] = 1;
    };
    json extra = {{"inventory", {{"gpus", {{{"uuid", "GPU-0"}, {"name", "NVIDIA H200"}, {"memory_mib", 143771}, {"idle_used_mib", 0}}}}}},
                  {"promotion", {{"exclusive_window", "02:00-04:00"}}}};
    World w(Recipes{}, extra);
    w.write_recipe("gpu-f32", "f32", gpu);
    w.write_recipe("gpu-q8", "q8", gpu);
    w.pass();
    REQUIRE(w.status_of("gpu-f32") == "qualifying");
    w.finish_qualification(speed(10.0));
    w.pass();
    REQUIRE(w.default_recipe() == "gpu-f32");
    REQUIRE(w.fleet.serving().size() == 1);
    CHECK_FALSE(w.qualifications.job);
    CHECK(w.condition("Qualification") == "OutsideExclusiveWindow");
    CHECK(w.status_of("gpu-q8") == "candidate");  // waiting for the window leaves it as it was

    w.clock.minute = 3 * 60;
    w.pass();
    REQUIRE(w.qualifications.job);
    CHECK(w.qualifications.job->recipe.id == "gpu-q8");
    CHECK(w.fleet.serving().empty());               // the default paused for it
    CHECK_FALSE(w.endpoint.current());
    w.pass();                                       // still qualifying: the default stays paused
    CHECK(w.fleet.serving().empty());
    w.finish_qualification(speed(9.9));
    w.pass();  // over: the qualification step lets the serving step bring the default back
    w.pass();
    REQUIRE(w.endpoint.current());
    CHECK(w.endpoint.current()->recipe_id == "gpu-f32");
}

TEST_CASE("controller: status, readiness and conditions answer while a drain is held open", "[controller]") {
    World w(Recipes{{"tiny-f32", "f32"}});
    w.pass();
    w.finish_qualification(speed(10.0));
    std::promise<void> draining, release;
    auto released = release.get_future().share();
    bool first = true;
    w.endpoint.during_switch = [&] {
        if (!std::exchange(first, false)) return;
        draining.set_value();
        released.wait();
    };
    std::thread pass([&] { w.pass(); });  // promotes f32 and switches the endpoint to it: blocks in the drain
    draining.get_future().wait();
    // Were the lock held across the drain, these reads would wait until it ends, which it does not
    // until they have answered: the wait below would time out instead.
    // The reads' answers are checked here, on the test's thread: Catch's assertions are not thread-safe.
    auto reads = std::async(std::launch::async, [&] {
        return std::vector<bool>{w.reconciler->ready(), !w.reconciler->conditions().empty(),
                                 daemon::status_view(*w.reconciler, *w.store)["default"]["recipe_id"] == "tiny-f32",
                                 !daemon::registry_view(*w.reconciler).empty(), w.reconciler->feasibility_of("tiny-f32").has_value()};
    });
    const bool answered = reads.wait_for(60s) == std::future_status::ready;
    release.set_value();
    pass.join();
    CHECK(reads.get() == std::vector<bool>(5, true));  // ready, conditions, the default, the registry, a feasibility verdict
    CHECK(answered);
    CHECK(w.endpoint.current()->recipe_id == "tiny-f32");
}

TEST_CASE("a ledger that cannot be written: which failures last, the fault each means, the reserve and the retry delays", "[controller][ledger]") {
    using daemon::ledger_retry_delay;
    // SQLite's primary codes: full, I/O error, read-only, cannot open and permission last; busy and locked pass.
    for (int code : {SQLITE_FULL, SQLITE_IOERR, SQLITE_READONLY, SQLITE_CANTOPEN, SQLITE_PERM, SQLITE_IOERR_WRITE, SQLITE_READONLY_DBMOVED})
        CHECK(state::lasting_write_failure(code));
    for (int code : {SQLITE_BUSY, SQLITE_LOCKED, SQLITE_CONSTRAINT, SQLITE_ERROR, 0}) CHECK_FALSE(state::lasting_write_failure(code));
    CHECK(daemon::ledger_fault(SQLITE_FULL, "x").reason == "DiskFull");
    CHECK(daemon::ledger_fault(SQLITE_READONLY, "x").reason == "ReadOnly");
    CHECK(daemon::ledger_fault(SQLITE_PERM, "x").reason == "ReadOnly");
    CHECK(daemon::ledger_fault(SQLITE_IOERR_WRITE, "x").reason == "IOError");
    CHECK_THAT(daemon::ledger_fault(SQLITE_FULL, "disk I/O").message, Catch::Contains("free space"));
    CHECK_FALSE(daemon::low_space_fault(daemon::kLedgerReserveBytes, "/d"));
    const auto low = daemon::low_space_fault(daemon::kLedgerReserveBytes - 1, "/d");
    REQUIRE(low);
    CHECK(low->reason == "DiskFull");
    CHECK_THAT(low->message, Catch::Contains("/d has 1048575 bytes left"));
    const std::pair<int, std::chrono::milliseconds> delays[] = {{0, 1s}, {1, 1s}, {2, 2s}, {3, 4s}, {6, 32s}, {7, 60s}, {50, 60s}, {1000000, 60s}};
    for (const auto& [failures, delay] : delays) {
        INFO(failures);
        CHECK(ledger_retry_delay(failures) == delay);
    }
}
