// Issue 16, the ledger's half: the ledger never serves a revision that is not in the registry, an id
// stays with the file that had it first, a newer revision supersedes older open ones, and what
// anvild writes is its user's alone. Each against a real anvild on a real git registry.
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <filesystem>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "daemon_fixture.hpp"
#include "state/store.hpp"
#include "test_support.hpp"

#ifdef ANVILD

using namespace anvil::test::daemon;

namespace {

// The recipe's transitions, oldest first.
json history_of(const Daemon& d, const std::string& recipe) { return d.get("/api/v1/recipes/" + recipe + "/history").second["data"]; }

json revisions_of(const Daemon& d, const std::string& recipe) { return d.get("/api/v1/recipes/" + recipe).second["data"]["revisions"]; }

bool has_transition(const json& history, const std::string& from, const std::string& to, const std::string& reason_part) {
    for (const auto& t : history)
        if ((from.empty() || t["from"] == from) && t["to"] == to && t["reason"].get<std::string>().find(reason_part) != std::string::npos) return true;
    return false;
}

std::size_t qualification_engines(const Daemon& d) {
    std::size_t n = 0;
    const json engines = d.get("/api/v1/engines").second;  // kept: a range-for over a temporary's member dangles
    for (const auto& e : engines["data"]) n += e["role"] == "qualification";
    return n;
}

std::string recipe_with_description(const std::string& id, const std::string& weights, const std::string& digest, const std::string& description) {
    json r = json::parse(embedded_recipe(id, weights, digest));
    r["description"] = description;
    return r.dump(2);
}

}  // namespace

TEST_CASE("a revision a force-push took out of the registry is never qualified, pinned or promoted", "[daemon][e2e][hardening][ledger]") {
    Daemon d("manual");
    EngineGate gate(d);
    d.repo.write("recipes/tiny.json", embedded_recipe("tiny", "f32", d.digest));
    const std::string first = d.repo.commit("tiny f32");
    d.start();
    REQUIRE(eventually([&] { return d.status_of("tiny") == "validated"; }, 120s));

    // A second revision arrives and supersedes the first, which was validated.
    d.repo.write("recipes/tiny.json", embedded_recipe("tiny", "bf16", d.digest));
    d.repo.commit("tiny bf16");
    d.post("/api/v1/registry/sync", "");
    REQUIRE(eventually([&] { return revisions_of(d, "tiny").size() == 2 && d.status_of("tiny") == "validated"; }, 120s));
    const auto revisions = revisions_of(d, "tiny");
    const std::int64_t orphan = revisions[0]["revision_id"], original = revisions[1]["revision_id"];
    CHECK(revisions[1]["status"] == "retired");
    CHECK(has_transition(history_of(d, "tiny"), "validated", "retired", "superseded by revision " + std::to_string(orphan)));

    // The branch is force-pushed back: the second revision's bytes are no longer in the registry.
    // Engines are held from now on, so the first revision's new qualification waits where we can see it.
    gate.hold();
    d.repo.git({"reset", "-q", "--hard", first});
    d.post("/api/v1/registry/sync", "");
    REQUIRE(eventually([&] { return d.get("/api/v1/registry").second["data"][0]["commit"] == first; }, 30s));
    // The first revision is the newest again and is qualified again; the orphan is retired.
    REQUIRE(eventually([&] {
        const auto r = revisions_of(d, "tiny");
        for (const auto& rev : r)
            if (rev["revision_id"] == orphan && rev["status"] != "retired") return false;
        return r[0]["revision_id"] == original && r[0]["status"] == "qualifying";
    }, 30s));
    CHECK(has_transition(history_of(d, "tiny"), "retired", "candidate", "back in the registry"));
    CHECK(has_transition(history_of(d, "tiny"), "validated", "retired", "superseded by revision " + std::to_string(original)));
    // Nothing of tiny in the registry is validated now: the orphan, validated before, is not pinned.
    auto pin = d.post("/api/v1/default", json{{"recipe_id", "tiny"}}.dump());
    CHECK(pin.first == 409);
    CHECK_THAT(pin.second.dump(), Catch::Contains("no validated revision in the registry") && Catch::Contains("revision " + std::to_string(orphan)));
    CHECK(d.get("/api/v1/default").second["data"].is_null());
    gate.release();
    REQUIRE(eventually([&] { return d.status_of("tiny") == "validated"; }, 120s));
    REQUIRE(d.cli({"pin", "tiny"}).exit_code == 0);
    REQUIRE(eventually([&] { return d.serving() == "tiny"; }, 60s));
    auto def = d.get("/api/v1/default").second["data"];
    CHECK(def["revision_id"] == original);
    for (const auto& t : history_of(d, "tiny"))
        if (t["revision_id"] == orphan) CHECK(t["to"] != "promoted");
    d.stop();
    check_ledger(d);
}

TEST_CASE("an id stays with the file that had it first, across commits, force-pushes and restarts", "[daemon][e2e][hardening][ledger]") {
    Daemon d;
    d.repo.write("recipes/m-tiny.json", embedded_recipe("tiny", "f32", d.digest));
    const std::string first = d.repo.commit("tiny");
    d.start();
    REQUIRE(eventually([&] { return d.status_of("tiny") == "promoted"; }, 120s));
    const std::int64_t owner_revision = revisions_of(d, "tiny")[0]["revision_id"];

    auto thief_is_refused = [&] {
        const auto registry = d.get("/api/v1/registry").second["data"][0];
        bool named = false;
        for (const auto& bad : registry["invalid"])
            if (bad["path"] == "recipes/a-thief.json")
                for (const auto& p : bad["problems"]) named = named || p.get<std::string>().find("recipes/m-tiny.json") != std::string::npos;
        return named;
    };
    // A newcomer whose path sorts first claims the default's id: it is invalid, naming both paths.
    d.repo.write("recipes/a-thief.json", embedded_recipe("tiny", "q8", d.digest));
    const std::string second = d.repo.commit("a newcomer claims tiny");
    d.post("/api/v1/registry/sync", "");
    REQUIRE(eventually([&] { return d.get("/api/v1/registry").second["data"][0]["commit"] == second; }, 30s));
    CHECK(thief_is_refused());
    CHECK(revisions_of(d, "tiny").size() == 1);

    // A restart reads the registry in full: the ledger remembers which file owned the id.
    d.stop();
    d.start();
    CHECK(thief_is_refused());
    CHECK(revisions_of(d, "tiny").size() == 1);

    // A force-push that rewrites history with the newcomer in it: a full read keeps the owner too.
    d.repo.git({"reset", "-q", "--hard", first});
    d.repo.write("recipes/a-thief.json", embedded_recipe("tiny", "q8", d.digest) + "\n");
    d.repo.write("recipes/other.json", embedded_recipe("other", "bf16", d.digest));
    const std::string rewritten = d.repo.commit("history rewritten");
    d.post("/api/v1/registry/sync", "");
    REQUIRE(eventually([&] { return d.get("/api/v1/registry").second["data"][0]["commit"] == rewritten; }, 30s));
    CHECK(thief_is_refused());
    CHECK(revisions_of(d, "tiny").size() == 1);
    CHECK(d.get("/api/v1/default").second["data"]["revision_id"] == owner_revision);

    // Once the owner goes away, the newcomer has the id.
    d.repo.git({"rm", "-q", "recipes/m-tiny.json"});
    d.repo.commit("the owner goes");
    d.post("/api/v1/registry/sync", "");
    REQUIRE(eventually([&] { return revisions_of(d, "tiny").size() == 2; }, 30s));
    CHECK_FALSE(thief_is_refused());
    d.stop();
    check_ledger(d);
}

TEST_CASE("a recipe removed while it is qualified is withdrawn, its engine stopped, and retired for good", "[daemon][e2e][hardening][ledger]") {
    Daemon d("manual");
    EngineGate gate(d);
    gate.hold();
    d.repo.write("recipes/tiny.json", embedded_recipe("tiny", "f32", d.digest));
    d.repo.commit("tiny");
    d.start();
    REQUIRE(eventually([&] { return d.status_of("tiny") == "qualifying" && gate.alive() == 1; }, 60s));

    d.repo.git({"rm", "-q", "recipes/tiny.json"});
    const std::string removal = d.repo.commit("tiny goes");
    d.post("/api/v1/registry/sync", "");
    REQUIRE(eventually([&] { return d.status_of("tiny") == "retired"; }, 30s));
    CHECK(has_transition(history_of(d, "tiny"), "qualifying", "retired", "removed from registry test at commit " + removal.substr(0, 12)));
    // The engine it was starting is stopped, and nothing qualifies it again.
    CHECK(eventually([&] { return gate.alive() == 0; }, 30s));
    gate.release();
    std::this_thread::sleep_for(3s);
    CHECK(d.status_of("tiny") == "retired");
    CHECK(d.get("/api/v1/status").second["qualifying"].is_null());
    CHECK(qualification_engines(d) == 0);
    CHECK(gate.alive() == 0);
    d.stop();
    check_ledger(d);
}

TEST_CASE("a newer revision supersedes the one being qualified, and the newer one is qualified", "[daemon][e2e][hardening][ledger]") {
    Daemon d("manual");
    EngineGate gate(d);
    gate.hold();
    d.repo.write("recipes/tiny.json", embedded_recipe("tiny", "f32", d.digest));
    d.repo.commit("tiny");
    d.start();
    REQUIRE(eventually([&] { return d.status_of("tiny") == "qualifying" && gate.alive() == 1; }, 60s));
    const std::int64_t older = revisions_of(d, "tiny")[0]["revision_id"];

    d.repo.write("recipes/tiny.json", recipe_with_description("tiny", "f32", d.digest, "a newer revision"));
    d.repo.commit("describe tiny");
    d.post("/api/v1/registry/sync", "");
    REQUIRE(eventually([&] { return revisions_of(d, "tiny").size() == 2; }, 30s));
    const std::int64_t newer = revisions_of(d, "tiny")[0]["revision_id"];
    REQUIRE(eventually([&] {
        for (const auto& r : revisions_of(d, "tiny"))
            if (r["revision_id"] == older) return r["status"] == "retired";
        return false;
    }, 30s));
    CHECK(has_transition(history_of(d, "tiny"), "qualifying", "retired", "superseded by revision " + std::to_string(newer)));
    gate.release();
    REQUIRE(eventually([&] { return d.status_of("tiny") == "validated"; }, 60s));
    CHECK(revisions_of(d, "tiny")[0]["revision_id"] == newer);
    d.stop();
    check_ledger(d);
}

TEST_CASE("revisions an older anvild left open behind a newer one are retired at start", "[daemon][e2e][hardening][ledger]") {
    Daemon d("manual");
    const std::string older_text = recipe_with_description("tiny", "f32", d.digest, "the older one");
    const std::string newer_text = embedded_recipe("tiny", "f32", d.digest);
    d.repo.write("recipes/tiny.json", newer_text);
    const std::string commit = d.repo.commit("tiny");
    std::int64_t older = 0, newer = 0;
    {
        // The ledger as an anvild without the supersede rule left it: two open revisions of tiny.
        anvil::state::Store store(d.dir / "data" / "anvil.db");
        const auto source = store.upsert_source((d.dir / "registry").string(), "main");
        const std::string url = (d.dir / "registry").string();
        older = store.ingest_revision(source, anvil::registry::parse_document(older_text, {url, commit, "recipes/tiny.json", std::string(40, 'b'), ""}))
                    .revision_id;
        newer = store.ingest_revision(source, anvil::registry::parse_document(newer_text, {url, commit, "recipes/tiny.json", std::string(40, 'c'), ""}))
                    .revision_id;
        REQUIRE(store.status_of(older) == anvil::state::Status::candidate);
    }
    d.start();
    REQUIRE(eventually([&] { return d.status_of("tiny") == "validated"; }, 120s));
    CHECK(has_transition(history_of(d, "tiny"), "candidate", "retired", "superseded by revision " + std::to_string(newer)));
    CHECK(revisions_of(d, "tiny")[0]["revision_id"] == newer);
    d.stop();
    check_ledger(d);
}

TEST_CASE("the data directory and every file anvild writes are its user's alone, also in an older data directory", "[daemon][e2e][hardening][ledger]") {
    Daemon d;
    // An older anvild's data directory: world-readable directory, ledger and log.
    const auto data = d.dir / "data";
    const mode_t previous = ::umask(022);
    {
        anvil::state::Store old(data / "anvil.db");
    }
    anvil::test::write_file(data / "logs" / "old-engine.log", "an older engine's log\n");
    ::umask(previous);
    fs::permissions(data, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
    fs::permissions(data / "anvil.db", fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
    fs::permissions(data / "logs" / "old-engine.log", fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);

    d.repo.write("recipes/tiny.json", embedded_recipe("tiny", "f32", d.digest));
    d.repo.commit("tiny");
    d.start();
    // A qualification writes receipts, quality samples and engine logs; the default serves.
    REQUIRE(eventually([&] { return d.serving() == "tiny"; }, 120s));

    auto mode_of = [](const fs::path& p) {
        struct stat st {};
        REQUIRE(::lstat(p.c_str(), &st) == 0);
        return st.st_mode & 0777;
    };
    CHECK(mode_of(data) == 0700);
    for (const char* name : {"anvil.db", "anvil.db-wal", "anvil.db-shm", "api-token", "addresses.json"}) {
        INFO(name);
        REQUIRE(fs::exists(data / name));
        CHECK(mode_of(data / name) == 0600);
    }
    std::size_t files = 0;
    bool receipts = false, samples = false;
    for (auto it = fs::recursive_directory_iterator(data); it != fs::recursive_directory_iterator(); ++it) {
        if (it->is_symlink()) continue;
        INFO(it->path().string());
        CHECK((mode_of(it->path()) & 077) == 0);
        ++files;
        receipts = receipts || it->path().string().find("/receipts/") != std::string::npos;
        samples = samples || it->path().string().find("/quality/") != std::string::npos;
    }
    CHECK(files > 10);
    CHECK(receipts);
    CHECK(samples);
    d.stop();
}

TEST_CASE("a default removed from the registry is retired and its engine stopped: the next validated recipe takes over, or nothing serves", "[daemon][e2e][hardening][ledger]") {
    Daemon d;  // auto: f32 is the first default; bf16 does not beat it on the tiny model and stays validated
    d.repo.write("recipes/tiny-f32.json", embedded_recipe("tiny-f32", "f32", d.digest));
    d.repo.write("recipes/tiny-bf16.json", embedded_recipe("tiny-bf16", "bf16", d.digest));
    d.repo.commit("two recipes");
    d.start();
    REQUIRE(eventually([&] { return d.serving() == "tiny-f32" && d.status_of("tiny-bf16") == "validated"; }, 120s));

    d.repo.git({"rm", "-q", "recipes/tiny-f32.json"});
    d.repo.commit("the default goes");
    d.post("/api/v1/registry/sync", "");
    REQUIRE(eventually([&] { return d.status_of("tiny-f32") == "retired" && d.serving() == "tiny-bf16"; }, 60s));
    const json history = d.get("/api/v1/recipes/tiny-f32/history").second["data"];
    CHECK(has_transition(history, "promoted", "retired", "removed from registry"));
    // The old default's engine is stopped once nothing is admitted to it.
    CHECK(eventually([&] {
        const json engines = d.get("/api/v1/engines").second["data"];
        if (!engines.is_array() || engines.size() != 1) return false;
        return engines[0]["role"] == "serving" && engines[0]["recipe_id"] == "tiny-bf16";
    }, 30s));

    d.repo.git({"rm", "-q", "recipes/tiny-bf16.json"});
    d.repo.commit("nothing left");
    d.post("/api/v1/registry/sync", "");
    REQUIRE(eventually([&] { return d.status_of("tiny-bf16") == "retired" && d.serving().empty(); }, 60s));
    // The endpoint stops admitting first; the engine stop that follows takes its own time.
    CHECK(eventually([&] { return d.get("/api/v1/engines").second["data"].empty(); }, 30s));
    httplib::Client endpoint("127.0.0.1", d.serve_port);
    auto r = endpoint.Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}]})", "application/json");
    REQUIRE(r);
    CHECK(r->status == 503);
    d.stop();
    check_ledger(d);
}

namespace {

// A tmpfs of `megabytes` mounted at `dir` for one test (needs root, as CI runs): a filesystem that
// fills up for real. Detached at the end, whatever still has files open in it.
struct SmallFilesystem {
    std::filesystem::path dir;
    bool mounted = false;
    SmallFilesystem(std::filesystem::path d, int megabytes) : dir(std::move(d)) {
        std::filesystem::create_directories(dir);
        const std::string options = "size=" + std::to_string(megabytes) + "m,mode=0700";
        mounted = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) == 0;
    }
    ~SmallFilesystem() {
        if (mounted) ::umount2(dir.c_str(), MNT_DETACH);
    }
};

// The serving engine's process group leader, as the API lists it.
int serving_pid(const Daemon& d) {
    const json engines = d.get("/api/v1/engines").second;  // kept: a range-for over a temporary's member dangles
    for (const auto& e : engines["data"])
        if (e["role"] == "serving" && e["pid"].is_number()) return e["pid"].get<int>();
    return 0;
}

bool measured_not_answering(const Daemon& d, int pid) {
    const json engines = d.get("/api/v1/engines").second;
    for (const auto& e : engines["data"])
        if (e["pid"] == pid) return e["health"] == "not answering" && e.value("health_measured", false);
    return false;
}

// Writes `path` until the filesystem says it is full.
void fill(const std::filesystem::path& path) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f);
    const std::string chunk(1 << 16, 'x');
    while (std::fwrite(chunk.data(), 1, chunk.size(), f) == chunk.size()) {
    }
    std::fclose(f);
}

json condition(const Daemon& d, const std::string& type) {
    const json status = d.get("/api/v1/status").second;
    for (const auto& c : status["conditions"])
        if (c["type"] == type) return c;
    return nullptr;
}

long cpu_ticks(int pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::istringstream fields(text.substr(text.rfind(')') + 2));
    std::string field;
    long utime = 0, stime = 0;
    for (int i = 3; fields >> field; ++i) {
        if (i == 14) utime = std::stol(field);
        if (i == 15) {
            stime = std::stol(field);
            break;
        }
    }
    return utime + stime;
}

}  // namespace

TEST_CASE("a full disk: anvild backs off and says why, keeps serving, measures its engines, and recovers by itself", "[daemon][e2e][hardening][ledger]") {
    Daemon d;
    SmallFilesystem data(d.dir / "data", 48);
    if (!data.mounted) {
        WARN("cannot mount a tmpfs here (not root, or no permission): the full-disk test needs one");
        return;
    }
    d.repo.write("recipes/tiny-f32.json", embedded_recipe("tiny-f32", "f32", d.digest));
    d.repo.commit("a recipe");
    d.start();
    REQUIRE(eventually([&] { return d.serving() == "tiny-f32"; }, 120s));
    REQUIRE(condition(d, "LedgerWritable")["status"] == "True");

    fill(d.dir / "data" / "filler");
    REQUIRE(eventually([&] { return condition(d, "LedgerWritable")["status"] == "False"; }, 15s));
    const json fault = condition(d, "LedgerWritable");
    CHECK(fault["reason"] == "DiskFull");
    CHECK_THAT(fault["message"].get<std::string>(), Catch::Contains("free space"));
    // The default still serves.
    httplib::Client endpoint("127.0.0.1", d.serve_port);
    endpoint.set_read_timeout(10, 0);
    const std::string chat = json{{"model", "anvil-default"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}}.dump();
    auto answered = endpoint.Post("/v1/chat/completions", chat, "application/json");
    REQUIRE(answered);
    CHECK(answered->status == 200);

    // Its engine dies: listed as measured, not as last recorded, and the condition says why nothing restarts it.
    const int first_pid = serving_pid(d);
    REQUIRE(first_pid > 0);
    ::kill(-first_pid, SIGKILL);  // its process group: the engine and the process that watches it
    REQUIRE(eventually([&] { return measured_not_answering(d, first_pid); }, 15s));
    CHECK(condition(d, "DefaultServing")["reason"] == "EngineNotAnswering");

    // Space comes back: the ledger takes writes again, the default's engine is started again.
    std::filesystem::remove(d.dir / "data" / "filler");
    REQUIRE(eventually([&] { return condition(d, "LedgerWritable")["status"] == "True"; }, 15s));
    REQUIRE(eventually([&] { return condition(d, "DefaultServing")["status"] == "True"; }, 60s));
    answered = endpoint.Post("/v1/chat/completions", chat, "application/json");
    REQUIRE(answered);
    CHECK(answered->status == 200);
    json after = d.get("/api/v1/engines").second;
    for (const auto& e : after["data"]) CHECK_FALSE(e.contains("health_measured"));

    // Nearly full: 3 MiB left, above the reserve, and a commit of documents larger than that. The
    // ingest's writes fail on the disk itself, pass after pass.
    fill(d.dir / "data" / "filler");
    std::filesystem::resize_file(d.dir / "data" / "filler", std::filesystem::file_size(d.dir / "data" / "filler") - (3u << 20));
    for (int i = 0; i < 6; ++i) {
        json big = json::parse(embedded_recipe("big-" + std::to_string(i), "f32", d.digest));
        big["description"] = std::string(900 * 1024, 'a' + i);
        d.repo.write("recipes/big-" + std::to_string(i) + ".json", big.dump());
    }
    d.repo.commit("documents larger than the space left");
    REQUIRE(eventually([&] { return condition(d, "LedgerWritable")["status"] == "False"; }, 20s));
    const int second_pid = serving_pid(d);
    REQUIRE(second_pid > 0);
    ::kill(-second_pid, SIGKILL);
    REQUIRE(eventually([&] { return measured_not_answering(d, second_pid); }, 30s));

    // Backing off: little CPU, and no flood of log lines (one per change of state, and a retry's
    // note of the engine's exit now and then).
    std::string line;
    while (d.process->read_line(line, 200)) {
    }
    const long before = cpu_ticks(d.process->pid());
    int lines = 0;
    const auto until = std::chrono::steady_clock::now() + 6s;
    while (std::chrono::steady_clock::now() < until)
        if (d.process->read_line(line, 100)) ++lines;
    const long ticks = cpu_ticks(d.process->pid()) - before;
    INFO("log lines in 6 s: " << lines << ", CPU ticks: " << ticks);
    CHECK(lines <= 12);  // a pass each second wrote three lines before
    CHECK(ticks < 60);   // under 0.6 s of CPU in 6 s (80-90% of a core before)

    // Room again: recovered at the next try (at once, or at most 60 s away), the commit ingested,
    // the engine started again.
    std::filesystem::remove(d.dir / "data" / "filler");
    REQUIRE(eventually([&] { return condition(d, "LedgerWritable")["status"] == "True"; }, 75s));
    REQUIRE(eventually([&] { return !d.status_of("big-5").empty(); }, 30s));
    REQUIRE(eventually([&] { return condition(d, "DefaultServing")["status"] == "True"; }, 60s));
    answered = endpoint.Post("/v1/chat/completions", chat, "application/json");
    REQUIRE(answered);
    CHECK(answered->status == 200);
    after = d.get("/api/v1/engines").second;
    for (const auto& e : after["data"]) CHECK_FALSE(e.contains("health_measured"));
}

#endif  // ANVILD
