// Against a real Slurm (tests/slurm/run.sh starts one from Debian's packages and runs these, which
// are hidden from a plain run): slurmrestd answers the client, bad tokens and addresses fail in one
// line that says what to do, anvild with a Slurm placement judges by the cluster's node and shows
// it in GET /api/v1/inventory and `anvil gpus --cluster`, places embedded and container engines as
// jobs, and the main job runs on the cluster.
#include <catch2/catch.hpp>

#include <csignal>
#include <cstdlib>
#include <map>
#include <thread>

#include <httplib.h>
#include <sqlite3.h>

#include "daemon/config/config.hpp"
#include "daemon_fixture.hpp"
#include "daemon/drivers/engine_supervisor.hpp"
#include "main_job.hpp"
#include "registry/document.hpp"
#include "state/store.hpp"
#include "daemon/drivers/slurm_driver.hpp"
#include "daemon/drivers/slurm_rest.hpp"
#include "test_support.hpp"

using namespace anvil::drivers;
using json = nlohmann::json;
using namespace std::chrono_literals;
using anvil::test::trimmed;

namespace {

std::string env(const char* name) {
    const char* v = std::getenv(name);
    if (!v || !*v) FAIL(std::string(name) + " is not set: run these through tests/slurm/run.sh, which starts the cluster");
    return v;
}

SlurmRestConfig live() {
    SlurmRestConfig c;
    c.address = env("ANVIL_SLURM_REST");
    c.user = env("ANVIL_SLURM_USER");
    c.token_file = env("ANVIL_SLURM_TOKEN_FILE");
    return c;
}

}  // namespace

TEST_CASE("slurmrestd: the cluster's node and its GPUs, and a bad token or address as one actionable line", "[.][slurm-live]") {
    const SlurmRest rest(live());
    CHECK(rest.ping()["pings"].is_array());
    const anvil::registry::SlurmCluster cluster = rest.nodes();
    REQUIRE(cluster.nodes.size() == 1);
    CHECK(cluster.nodes[0].name == env("ANVIL_SLURM_NODE"));
    CHECK(cluster.nodes[0].gpu_count() == std::stoi(env("ANVIL_SLURM_GPUS")));
    CHECK(cluster.nodes[0].usable());
    CHECK_THAT(cluster.source, Catch::Contains("Slurm 22.05"));

    anvil::test::TempDir dir;
    SlurmRestConfig bad = live();
    bad.token_file = dir / "token";
    anvil::test::write_file(bad.token_file, "eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl\n");
    try {
        SlurmRest(bad).nodes();
        FAIL("a forged token was accepted");
    } catch (const SlurmError& e) {
        CHECK_THAT(e.what(), Catch::Contains("GET /slurm/v0.0.38/nodes") && Catch::Contains("scontrol token"));
    }
    bad.token_file = dir / "missing";
    CHECK_THROWS_WITH(SlurmRest(bad).nodes(), Catch::Contains("cannot read the token file") && Catch::Contains("placement.token_file"));
    bad = live();
    bad.address = "http://127.0.0.1:1";
    CHECK_THROWS_WITH(SlurmRest(bad).ping(), Catch::Contains("is slurmrestd running there (placement.rest)"));
}

#ifdef ANVILD
namespace {

// d's configuration placed on this cluster: its address, user and token, partition gpu, and
// `extra` merged into the placement; `top` into the whole configuration.
void place_on_cluster(const anvil::test::daemon::Daemon& d, const json& extra, const json& top = json::object()) {
    json config = json::parse(anvil::test::read_file(d.dir / "anvild.json"));
    config["placement"] = {{"kind", "slurm"},
                           {"rest", env("ANVIL_SLURM_REST")},
                           {"user", env("ANVIL_SLURM_USER")},
                           {"token_file", env("ANVIL_SLURM_TOKEN_FILE")},
                           {"partition", "gpu"}};
    config["placement"].update(extra);
    config.update(top);
    anvil::test::write_file(d.dir / "anvild.json", config.dump(2));
}

// Where the jobs, which run as the token's user, write their output (and read the model beside it).
std::filesystem::path job_directory(const anvil::test::daemon::Daemon& d) {
    const auto jobs = d.dir / "jobs";
    std::filesystem::create_directories(jobs);
    std::filesystem::permissions(jobs, std::filesystem::perms::all | std::filesystem::perms::sticky_bit);
    return jobs;
}

}  // namespace

TEST_CASE("anvild with a Slurm placement judges by the cluster's node and shows the cluster", "[.][slurm-live]") {
    using namespace anvil::test::daemon;
    Daemon d;
    place_on_cluster(d, {{"gpu_memory_mib", {{"*", 81559}}}});
    json eight = json::parse(unpinned_container_recipe("eight-gpus"));
    eight["hardware_id"] = "h100-80gb";
    eight["hardware_count"] = 8;
    d.repo.write("recipes/eight-gpus.json", eight.dump(2));
    d.repo.commit("a recipe no node can hold");
    d.start();

    auto [code, inventory] = d.get("/api/v1/inventory");
    REQUIRE(code == 200);
    const json& cluster = inventory["data"]["cluster"];
    CHECK(cluster["placement"]["kind"] == "slurm");
    REQUIRE(cluster["nodes"].size() == 1);
    CHECK(cluster["nodes"][0]["gpu_count"] == std::stoi(env("ANVIL_SLURM_GPUS")));
    const json& judging = inventory["data"]["judging_with"];
    CHECK_THAT(judging["source"].get<std::string>(), Catch::Contains("the largest Slurm node (" + env("ANVIL_SLURM_NODE")));
    REQUIRE(judging["inventory"]["gpus"].size() == std::size_t(std::stoi(env("ANVIL_SLURM_GPUS"))));
    CHECK(judging["inventory"]["gpus"][0]["total_bytes"]["value"] == 81559LL * 1024 * 1024);

    // A recipe needing more GPUs than any node has is infeasible, and says which node it was judged by.
    REQUIRE(eventually([&] { return d.status_of("eight-gpus") == "rejected"; }, 60s));
    const std::string feasibility = d.get("/api/v1/recipes/eight-gpus/feasibility").second.dump();
    CHECK_THAT(feasibility, Catch::Contains("needs 8 GPUs, the largest Slurm node (" + env("ANVIL_SLURM_NODE") + ", of 1 usable in partition gpu) has " +
                                            env("ANVIL_SLURM_GPUS")));

    const auto shown = d.cli({"gpus", "--cluster"});
    INFO(shown.output);
    CHECK(shown.exit_code == 0);
    CHECK_THAT(shown.output, Catch::Contains("placement   slurm") && Catch::Contains(env("ANVIL_SLURM_NODE")) &&
                                 Catch::Contains(env("ANVIL_SLURM_GPUS") + "/" + env("ANVIL_SLURM_GPUS")));
    CHECK(d.cli({"gpus", "--cluster", "--json"}).exit_code == 0);
}

namespace {

// Our jobs Slurm runs or queues now, by engine id.
std::map<std::string, std::int64_t> live_jobs(const SlurmRest& rest) {
    std::map<std::string, std::int64_t> out;
    const json answer = rest.get("/slurm/v0.0.38/jobs");
    for (const auto& j : answer["jobs"]) {
        const std::string name = j["name"].get<std::string>(), state = j["job_state"].get<std::string>();
        if (name.rfind("anvil:", 0) == 0 && slurm_job_alive(state)) out[name.substr(6)] = j["job_id"].get<std::int64_t>();
    }
    return out;
}

// The engine serving the default, as GET /api/v1/engines lists it: its engine id, or "".
std::string serving_engine(const anvil::test::daemon::Daemon& d) {
    for (const auto& e : d.get("/api/v1/engines").second.value("data", json::array()))
        if (e["role"] == "serving" && e["health"] == "healthy" && e["tracked"] == true) return e["engine_id"].get<std::string>();
    return "";
}

// Waits until `recipe` is promoted and the endpoint forwards to it through a tracked job.
void promoted_and_served(const anvil::test::daemon::Daemon& d, const std::string& recipe) {
    using namespace std::chrono_literals;
    const bool promoted = anvil::test::daemon::eventually([&] { return d.status_of(recipe) == "promoted"; }, 60s);
    INFO(d.get("/api/v1/recipes/" + recipe + "/history").second.dump());
    REQUIRE(promoted);
    REQUIRE(anvil::test::daemon::eventually([&] { return !serving_engine(d).empty() && d.serving() == recipe; }, 120s));
}

// tests/slurm/cluster.sh COMMAND on the cluster run.sh started (rest-stop, rest-start).
void cluster(const std::string& command) {
    const auto r = anvil::test::run({"bash", env("ANVIL_SLURM_CLUSTER_SCRIPT"), command, env("ANVIL_SLURM_CLUSTER_DIR")});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
}

std::string condition_reason(const anvil::test::daemon::Daemon& d, const std::string& type) {
    for (const auto& c : d.get("/api/v1/status").second.value("conditions", json::array()))
        if (c["type"] == type) return c["reason"].get<std::string>();
    return "";
}

bool completes(const anvil::test::daemon::Daemon& d) {
    httplib::Client endpoint("127.0.0.1", d.serve_port);
    endpoint.set_read_timeout(30);
    auto r = endpoint.Post("/v1/completions", R"({"model": "anvil-default", "prompt": "Hello", "max_tokens": 4, "temperature": 0})",
                           "application/json");
    return r && r->status == 200;
}

}  // namespace

TEST_CASE("anvild places engines as Slurm jobs: promotes, adopts after SIGKILL, restarts after scancel, time limit, node failure",
          "[.][slurm-live]") {
    using namespace anvil::test::daemon;
    const SlurmRest rest(live());
    Daemon d;
    // The jobs run as the token's user on the node: they write their output here and read the model.
    place_on_cluster(d, {{"job_directory", job_directory(d).string()}});
    d.repo.write("recipes/tiny-f32.json", embedded_recipe("tiny-f32", "f32", d.digest));
    d.repo.commit("one embedded recipe");
    d.start();

    // Qualified by a job, promoted, and served by a job; the endpoint answers through it.
    promoted_and_served(d, "tiny-f32");
    const std::string first = serving_engine(d);
    auto jobs_now = live_jobs(rest);
    REQUIRE(jobs_now.count(first) == 1);
    CHECK(jobs_now.size() == 1);  // the qualification's job is gone
    CHECK(completes(d));
    const auto engines = d.get("/api/v1/engines").second["data"];
    CHECK(engines[0]["driver"] == "slurm-embedded");
    // The job is labelled with what it serves, and its output is the engine's log.
    const json job = rest.get("/slurm/v0.0.38/job/" + std::to_string(jobs_now[first]))["jobs"][0];
    const json labels = json::parse(job["comment"].get<std::string>())["anvil"];
    CHECK(labels["engine_id"] == first);
    CHECK(labels["recipe_id"] == "tiny-f32");
    CHECK(job["requeue"] == false);  // a job Slurm ends is an exit, never brought back under the same id
    const auto log = d.get("/api/v1/engines/" + std::to_string(engines[0]["id"].get<std::int64_t>()) + "/log").second;
    CHECK_THAT(log["data"]["text"].get<std::string>(), Catch::Contains("listening"));

    // SIGKILL: the restarted anvild adopts the job; nothing is submitted again.
    d.kill();
    d.start();
    REQUIRE(eventually([&] { return serving_engine(d) == first; }, 60s));
    CHECK(live_jobs(rest) == jobs_now);
    CHECK(completes(d));

    // SIGKILL with slurmrestd down as well: the restarted anvild cannot see the job, keeps its
    // record, and submits nothing until slurmrestd answers; then it adopts that same job.
    d.kill();
    cluster("rest-stop");
    d.start();
    REQUIRE(eventually([&] { return condition_reason(d, "DefaultServing") == "AwaitingAdoption"; }, 30s));
    std::this_thread::sleep_for(3s);  // several passes
    CHECK(condition_reason(d, "DefaultServing") == "AwaitingAdoption");
    const json untracked = d.get("/api/v1/engines").second["data"];
    REQUIRE(untracked.size() == 1);
    CHECK(untracked[0]["engine_id"] == first);
    CHECK(untracked[0]["tracked"] == false);
    const auto judging_source = [&] { return d.get("/api/v1/inventory").second["data"]["judging_with"].value("source", std::string()); };
    CHECK_THAT(judging_source(), Catch::Contains("GPU gates stay unknown until slurmrestd answers"));
    cluster("rest-start");
    REQUIRE(eventually([&] { return serving_engine(d) == first; }, 60s));
    CHECK(live_jobs(rest) == jobs_now);
    CHECK(completes(d));
    // The inventory is read again once slurmrestd answers, without a reload.
    CHECK(eventually([&] { return judging_source().find("the largest Slurm node") != std::string::npos; }, 30s));

    // scancel from outside: an engine exit, and the default is started again as a new job.
    rest.remove("/slurm/v0.0.38/job/" + std::to_string(jobs_now[first]));
    REQUIRE(eventually([&] { const auto e = serving_engine(d); return !e.empty() && e != first; }, 120s));
    const std::string second = serving_engine(d);
    jobs_now = live_jobs(rest);
    CHECK(jobs_now.size() == 1);
    REQUIRE(jobs_now.count(second) == 1);
    CHECK(completes(d));

    // A time limit: Slurm ends the job (TIMEOUT) and anvild starts another.
    rest.post("/slurm/v0.0.38/job/" + std::to_string(jobs_now[second]), json{{"time_limit", 1}});
    REQUIRE(eventually([&] { const auto e = serving_engine(d); return !e.empty() && e != second; }, 240s));
    const json ended = rest.get("/slurm/v0.0.38/job/" + std::to_string(jobs_now[second]))["jobs"][0];
    CHECK(ended["job_state"] == "TIMEOUT");
    CHECK(live_jobs(rest).size() == 1);
    CHECK(completes(d));

    // A node failure: Slurm ends the job (NODE_FAIL) and anvild starts another once the node is back.
    const std::string third = serving_engine(d);
    jobs_now = live_jobs(rest);
    REQUIRE(jobs_now.count(third) == 1);
    cluster("node-fail");
    REQUIRE(eventually([&] { const auto e = serving_engine(d); return !e.empty() && e != third; }, 120s));
    CHECK(rest.get("/slurm/v0.0.38/job/" + std::to_string(jobs_now[third]))["jobs"][0]["job_state"] == "NODE_FAIL");
    CHECK(live_jobs(rest).size() == 1);
    CHECK(completes(d));

    d.stop();  // stop_engines_on_exit: the job is cancelled
    CHECK(eventually([&] { return live_jobs(rest).empty(); }, 60s));
}
#endif

#ifdef ANVILD
namespace {

}  // namespace

TEST_CASE("anvild runs a container recipe as a Slurm job under rootless podman, and its stop removes the container", "[.][slurm-live]") {
    using namespace anvil::test::daemon;
    if (anvil::test::run({"podman", "--version"}).exit_code != 0) {
        WARN("podman is not installed: the container case is left out (scripts/install-deps.sh installs it)");
        return;
    }
    const std::string user = env("ANVIL_SLURM_USER");
    Daemon d;
    const auto jobs = job_directory(d);
    // The job user's own podman, as a site would give it: rootless, its storage under its HOME,
    // which the placement's environment names (this cluster's user has no home of its own).
    // Its runtime directory is the test's too, so that the pause process rootless podman leaves
    // holding the user's namespace is this test's to end.
    const auto home = jobs / "home", runtime_dir = home / "xdg";
    std::filesystem::create_directories(runtime_dir);
    std::filesystem::permissions(runtime_dir, std::filesystem::perms::owner_all);
    REQUIRE(anvil::test::run({"chown", "-R", user, home.string()}).exit_code == 0);
    const std::vector<std::string> runtime_arguments = {"--root", (home / "storage").string(), "--runroot", (home / "run").string(),
                                                        "--cgroup-manager", "cgroupfs", "--events-backend", "file"};
    const auto as_user = [&](const std::vector<std::string>& arguments) {
        std::vector<std::string> argv = {"runuser", "-u", user, "--", "env", "HOME=" + home.string(), "XDG_RUNTIME_DIR=" + runtime_dir.string(),
                                         "podman"};
        argv.insert(argv.end(), runtime_arguments.begin(), runtime_arguments.end());
        argv.insert(argv.end(), arguments.begin(), arguments.end());
        return anvil::test::run(argv, home);
    };
    std::string why;
    const auto tar = anvil::test::engine_rootfs_tar(d.dir.path(), ANVIL_ENGINE, why);
    REQUIRE(!tar.empty());
    const auto imported = as_user({"import", tar.string(), "localhost/anvil-slurm:test"});
    INFO(imported.output);
    REQUIRE(imported.exit_code == 0);
    const std::string digest = trimmed(as_user({"image", "inspect", "--format", "{{.Digest}}", "localhost/anvil-slurm:test"}).output);
    REQUIRE(digest.rfind("sha256:", 0) == 0);

    place_on_cluster(d, {{"job_directory", jobs.string()}, {"environment", {{"HOME", home.string()}, {"XDG_RUNTIME_DIR", runtime_dir.string()}}}},
                     {{"container_runtime_arguments", runtime_arguments}});
    json recipe = json::parse(embedded_recipe("tiny-box", "f32", d.digest));
    recipe["hardware_id"] = "cpu";
    recipe["launch"] = {{"kind", "docker"},
                        {"image", "localhost/anvil-slurm@" + digest},
                        {"mounts", {{{"source", "${MODEL_ROOT}"}, {"target", "/models"}, {"read_only", true}}}},
                        {"arguments",
                         {"/bin/anvil-engine", "serve", "--model", "/models/tiny", "--served-model-name", "tiny-f32", "--host", "${HOST}", "--port",
                          "${PORT}", "--max-context", "512", "--max-seqs", "4"}},
                        {"environment", json::object()}};
    d.repo.write("recipes/tiny-box.json", recipe.dump(2));
    d.repo.commit("a container recipe");
    d.start();

    promoted_and_served(d, "tiny-box");
    const auto engines = d.get("/api/v1/engines").second["data"];
    REQUIRE(engines.size() == 1);
    CHECK(engines[0]["driver"] == "slurm-container");
    CHECK(completes(d));
    // The container runs under the job user's podman, named for the engine, with its labels.
    const std::string name = "anvil-" + engines[0]["engine_id"].get<std::string>();
    const auto labels = as_user({"inspect", "--format", "{{index .Config.Labels \"anvil.recipe\"}}", name});
    INFO(labels.output);
    CHECK(trimmed(labels.output) == "tiny-box");

    // Stopping anvild cancels the job; podman removes the container as it ends.
    d.stop();
    const SlurmRest rest(live());
    CHECK(eventually([&] { return live_jobs(rest).empty(); }, 60s));
    CHECK(eventually([&] { return trimmed(as_user({"ps", "--all", "--format", "{{.Names}}"}).output).empty(); }, 30s));
    const auto pause = runtime_dir / "libpod" / "tmp" / "pause.pid";
    if (std::filesystem::exists(pause)) ::kill(std::stoi(anvil::test::read_file(pause)), SIGKILL);
}
#endif

#ifdef ANVILD
TEST_CASE("a native recipe's engine runs as a Slurm job: ready on its node, answers, its log, stopped by scancel", "[.][slurm-live]") {
    using namespace anvil::test::daemon;
    // A native launch runs a host binary no digest pins, so anvild rejects such recipes on paper;
    // the supervisor is what would run one, and it places it on the cluster as slurm-process.
    anvil::test::TempDir dir;
    const auto models = dir / "models";
    REQUIRE(anvil::test::run({ANVIL_ENGINE, "make-model", "--out", (models / "tiny").string(), "--preset", "tiny", "--seed", "3"}).exit_code == 0);
    const auto jobs = dir / "jobs";
    std::filesystem::create_directories(jobs);
    std::filesystem::permissions(jobs, std::filesystem::perms::all | std::filesystem::perms::sticky_bit);
    json j = json::parse(anvil::test::read_file(std::string(ANVIL_EXAMPLES_DIR) + "/registry/recipes/anvil-tiny-llama-f32-cpu.json"));
    j["id"] = "tiny-native";
    // anvil-engine by name: anvil gives it the model, its name and its address after these.
    j["launch"] = {{"kind", "native"},
                   {"model", {{"path", "${MODEL_ROOT}/tiny"}, {"dtype", "f32"}, {"licence", "MIT"}}},
                   {"arguments", {ANVIL_ENGINE, "serve", "--max-context", "512", "--max-seqs", "2", "--threads", "1"}},
                   {"environment", json::object()}};
    const auto doc = anvil::registry::parse_document(j.dump(), {"test", "", "recipes/tiny-native.json", "", ""});
    REQUIRE(doc.valid());
    anvil::state::Store store(dir / "state.db");
    const auto revision = store.ingest_revision(0, doc).revision_id;

    anvil::daemon::DaemonConfig config;
    config.data_dir = dir / "data";
    config.model_root = models;
    config.port_first = 24300;
    config.port_last = 24399;
    config.engine_ready_timeout = 60s;
    anvil::drivers::SlurmPlacement placement;
    placement.rest = live();
    placement.partition = "gpu";
    placement.job_directory = jobs;
    config.slurm = placement;
    anvil::drivers::EngineSupervisor supervisor(anvil::daemon::supervisor_settings(config), store);
    REQUIRE_FALSE(supervisor.unsupported(*doc.recipe()));

    const auto engine = supervisor.start(revision, *doc.recipe(), anvil::drivers::EngineRole::qualification);
    CHECK(engine.handle.driver == "slurm-process");
    REQUIRE_FALSE(engine.handle.job_id.empty());
    CHECK(supervisor.answers(engine));
    // It listens on every address of its node, so it takes only its own key.
    REQUIRE_FALSE(engine.handle.api_key.empty());
    httplib::Client client(engine.handle.host, engine.handle.port);
    client.set_read_timeout(30);
    const std::string body = R"({"model": "anvil-tiny-llama", "prompt": "Hello", "max_tokens": 4, "temperature": 0})";
    const auto refused = client.Post("/v1/completions", body, "application/json");
    REQUIRE(refused);
    CHECK(refused->status == 401);
    client.set_bearer_token_auth(engine.handle.api_key);
    const auto answer = client.Post("/v1/completions", body, "application/json");
    REQUIRE(answer);
    CHECK(answer->status == 200);
    const SlurmRest rest(live());
    const json job = rest.get("/slurm/v0.0.38/job/" + engine.handle.job_id)["jobs"][0];
    CHECK(job["job_state"] == "RUNNING");
    CHECK(json::parse(job["comment"].get<std::string>())["anvil"]["recipe_id"] == "tiny-native");
    CHECK_THAT(supervisor.logs(engine, 50), Catch::Contains("listening"));

    supervisor.stop(engine, 5s);
    CHECK(supervisor.engines().empty());
    CHECK(live_jobs(rest).empty());
    const json ended = rest.get("/slurm/v0.0.38/job/" + engine.handle.job_id)["jobs"][0];
    CHECK(ended["job_state"] == "CANCELLED");
}
#endif

#if defined(ANVILD) && defined(ANVIL_MAIN_JOB_BUILD_DIR)
namespace {

struct EngineSpan {
    std::int64_t revision = 0;
    std::string driver, job_id, role, started_at, stopped_at, recipe;
};

// Every engine the ledger at `database` recorded, oldest first (the store keeps only the running
// ones at hand).
std::vector<EngineSpan> engine_spans(const std::filesystem::path& database) {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open_v2(database.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
    sqlite3_stmt* query = nullptr;
    REQUIRE(sqlite3_prepare_v2(db,
                               "SELECT e.revision_id, e.driver, coalesce(e.job_id, ''), e.role, e.started_at, coalesce(e.stopped_at, ''), "
                               "r.recipe_id FROM engines e JOIN recipe_revisions r ON r.id = e.revision_id ORDER BY e.id",
                               -1, &query, nullptr) == SQLITE_OK);
    std::vector<EngineSpan> out;
    const auto text = [&](int column) { return std::string(reinterpret_cast<const char*>(sqlite3_column_text(query, column))); };
    while (sqlite3_step(query) == SQLITE_ROW)
        out.push_back({sqlite3_column_int64(query, 0), text(1), text(2), text(3), text(4), text(5), text(6)});
    sqlite3_finalize(query);
    sqlite3_close(db);
    return out;
}

}  // namespace

TEST_CASE("the main job on the cluster: the example recipes' engines run as Slurm jobs, candidates beside their control", "[.][slurm-live]") {
    anvil::test::TempDir work;
    const auto jobs = work / "jobs";
    std::filesystem::create_directories(jobs);
    std::filesystem::permissions(jobs, std::filesystem::perms::all | std::filesystem::perms::sticky_bit);
    const auto placement = work / "placement.json";
    anvil::test::write_file(placement, json{{"kind", "slurm"},
                                            {"rest", env("ANVIL_SLURM_REST")},
                                            {"user", env("ANVIL_SLURM_USER")},
                                            {"token_file", env("ANVIL_SLURM_TOKEN_FILE")},
                                            {"partition", "gpu"},
                                            {"job_directory", jobs.string()}}
                                           .dump(2));
    const auto run = work / "run";
    setenv("ANVIL_LOG", "info", 1);  // anvild's default, which the daemon cases above turned down
    const auto result = anvil::test::main_job::run(run, 16796, placement);
    INFO(result.output);
    REQUIRE(result.exit_code == 0);
    CHECK_THAT(result.output, Catch::Contains("== engines placed by " + placement.string()));
    CHECK_THAT(result.output, Catch::Contains("source Slurm: the largest Slurm node (" + env("ANVIL_SLURM_NODE")));
    anvil::test::main_job::check(run, result.output);

    // Every engine was a Slurm job, and each candidate was measured while the default it was
    // compared with served from a job of its own. The pinned GPU recipe (a docker launch, below)
    // is a container job where its submission got as far as an engine: how far depends on timing
    // (a slower, sanitized build got there).
    const std::string gpu_recipe = "glm53-flash-exl3-tr3-4bpw-dflash2-rtxpro6000-vllm-tp2";
    const auto spans = engine_spans(run / "data" / "anvil.db");
    REQUIRE(spans.size() >= 5);  // four qualifications and at least the first default's serving job
    std::size_t beside = 0;
    for (const auto& e : spans) {
        INFO(e.role << " engine of revision " << e.revision << " (recipe " << e.recipe << ")");
        CHECK(e.driver == (e.recipe == gpu_recipe ? "slurm-container" : "slurm-embedded"));
        CHECK_FALSE(e.job_id.empty());
        CHECK_FALSE(e.stopped_at.empty());
        if (e.role != "qualification") continue;
        for (const auto& serving : spans)
            if (serving.role == "serving" && serving.revision != e.revision && serving.started_at <= e.started_at && e.stopped_at <= serving.stopped_at)
                ++beside;
    }
    CHECK(beside >= 3);  // every qualification after the first default's

    // The unpinned GPU recipe is rejected on paper; the pinned one needs 2 of the node's 4 GPUs,
    // whose memory no record gives, so it is tried, and its job cannot start on this cluster's
    // stand-in GPUs: failed at startup, never validated.
    anvil::state::Store store(run / "data" / "anvil.db");
    const auto unpinned = store.recipe("glm53-flash-exl3-q4-rtxpro6000-sglang-tp4");
    REQUIRE(unpinned);
    CHECK(unpinned->revisions.front().status == anvil::state::Status::rejected);
    const auto tried = store.recipe(gpu_recipe);
    REQUIRE(tried);
    const auto status = tried->revisions.front().status;
    CHECK(status == anvil::state::Status::failed);
    // Its job asked for GPUs of the type of the node it was judged by.
    CHECK_THAT(anvil::test::read_file(run / "anvild.log"), Catch::Contains("(recipe glm53-flash-exl3-tr3-4bpw-dflash2-rtxpro6000-vllm-tp2 at ") &&
                                                               Catch::Contains("gres gpu:standin:2"));
    CHECK(live_jobs(SlurmRest(live())).empty());
}
#endif
