// The state store: schema and migrations, ingesting revisions, guarded transitions, promotion,
// the derived status, queries, and failure modes (disk full, read-only).
#include <catch2/catch.hpp>

#include "registry/document.hpp"
#include "state/migrations.hpp"
#include "state/inspection.hpp"
#include "state/store.hpp"
#include "test_support.hpp"

using namespace anvil;
using namespace anvil::state;
using anvil::test::TempDir;

namespace {

registry::Document recipe_doc(const std::string& id, const std::string& seed = "003_", const std::string& description = "") {
    auto j = nlohmann::json::parse(test::seed_text(seed));
    j["data"]["id"] = id;
    if (!description.empty()) j["data"]["description"] = description;
    return registry::parse_document(j.dump(), {"/srv/registry", std::string(40, 'a'), "recipes/" + id + ".json", std::string(40, 'b'), ""});
}

Id local_evidence(Store& store, Id revision, const std::string& metric, EvidenceClass cls = EvidenceClass::local) {
    EvidenceRow e;
    e.revision_id = revision;
    e.metric = metric;
    e.min = e.max = registry::Number{std::int64_t{1}};
    e.unit = "ratio";
    e.evidence_class = cls;
    e.source = "test";
    e.receipt_sha256 = std::string(64, 'c');
    return store.add_evidence(e);
}

void pass_hard_gates(Store& store, Id revision, EvidenceClass cls = EvidenceClass::local) {
    for (const auto& gate : default_hard_gates()) {
        Id e = local_evidence(store, revision, "gate:" + gate, cls);
        store.add_verdict({0, revision, gate, GateResult::pass, std::nullopt, {"passed"}, {e}, ""});
    }
}

TransitionRequest move(Id revision, Status to, std::string actor = "reconciler") {
    return {revision, to, "test move", std::move(actor), {}, {}, std::nullopt};
}

Id validated_revision(Store& store, const std::string& id, const std::string& seed = "003_") {
    Id r = store.ingest_revision(0, recipe_doc(id, seed)).revision_id;
    pass_hard_gates(store, r);
    store.transition(move(r, Status::qualifying));
    store.transition(move(r, Status::validated));
    return r;
}

}  // namespace

TEST_CASE("a new store is WAL, has foreign keys and the newest schema", "[state]") {
    TempDir tmp;
    Store store(tmp / "data/state.db");
    CHECK(store.writable());
    CHECK(store.schema_version() == current_schema_version());
    CHECK(anvil::state::Inspection(store).integrity_check() == "ok");
    Connection raw(tmp / "data/state.db", OpenMode::read_only);
    Statement mode(raw, "PRAGMA journal_mode");
    REQUIRE(mode.step());
    CHECK(mode.text(0) == "wal");
    // Foreign keys are enforced: evidence for a revision that does not exist is refused.
    EvidenceRow orphan;
    orphan.revision_id = 999;
    orphan.metric = "x";
    orphan.unit = "ratio";
    orphan.source = "test";
    CHECK_THROWS_WITH(store.add_evidence(orphan), Catch::Contains("FOREIGN KEY"));
}

TEST_CASE("a file written by every earlier schema version is migrated with its data", "[state][migrations]") {
    for (int version = 1; version < current_schema_version(); ++version) {
        INFO("from schema version " << version);
        TempDir tmp;
        const auto file = tmp / "state.db";
        {
            Connection db(file, OpenMode::read_write_create);
            migrate(db, version);
            // Rows as an anvil of that version wrote them, through the tables version 1 created.
            db.exec("INSERT INTO recipes (id, latest_revision_id, status, engine, hardware_id, pinned, search_text, first_seen_at) "
                    "VALUES ('old-recipe', 1, 'candidate', 'vllm', 'gpu', 1, 'old-recipe', '2026-01-01T00:00:00.000Z')");
            db.exec("INSERT INTO recipe_revisions (id, recipe_id, sha256, commit_id, path, blob_id, engine, hardware_id, launch_kind, "
                    "serving_slot, pinned, unpinned_reasons, document, created_at) VALUES (1, 'old-recipe', 'abc', 'c0ffee', "
                    "'recipes/old.json', 'b10b', 'vllm', 'gpu', 'docker', 'default', 1, '[]', '{}', '2026-01-01T00:00:00.000Z')");
            db.exec("INSERT INTO transitions (id, revision_id, from_status, to_status, reason, evidence_ids, verdict_ids, actor, created_at) "
                    "VALUES (1, 1, NULL, 'candidate', 'ingested', '[]', '[]', 'reconciler', '2026-01-01T00:00:00.000Z')");
            db.exec("INSERT INTO revision_status VALUES (1, 'candidate', 'default', 1)");
            // An engine still running, from the version that added engines (2) on; a Slurm job's from 7.
            if (version >= 2 && version < 7)
                db.exec("INSERT INTO engines (id, revision_id, driver, pid, port, started_at, health, health_at) "
                        "VALUES (5, 1, 'process', 4242, 8000, '2026-01-01T00:00:00.000Z', 'healthy', '2026-01-01T00:00:00.000Z')");
            if (version >= 7)
                db.exec("INSERT INTO engines (id, revision_id, driver, port, started_at, health, health_at, engine_key, role, job_id) "
                        "VALUES (5, 1, 'slurm-embedded', 8000, '2026-01-01T00:00:00.000Z', 'healthy', '2026-01-01T00:00:00.000Z', "
                        "'e-old', 'serving', '77')");
        }
        Store store(file);
        CHECK(store.schema_version() == current_schema_version());
        auto detail = store.recipe("old-recipe");
        REQUIRE(detail);
        CHECK(detail->history.size() == 1);
        CHECK(store.status_of(1) == Status::candidate);
        if (version >= 2) {
            const auto engines = store.running_engines();
            REQUIRE(engines.size() == 1);
            CHECK(engines[0].id == 5);
            CHECK(engines[0].port == 8000);
            if (version >= 7) CHECK(engines[0].job_id == "77");
        }
        store.transition(move(1, Status::rejected));
        CHECK(anvil::state::Inspection(store).statuses() == anvil::state::Inspection(store).statuses_from_ledger());
        CHECK(anvil::state::Inspection(store).integrity_check() == "ok");
    }
}

TEST_CASE("a file from a newer anvil is refused with advice", "[state][migrations]") {
    TempDir tmp;
    {
        Connection db(tmp / "state.db", OpenMode::read_write_create);
        db.exec("PRAGMA user_version = 999");
    }
    CHECK_THROWS_WITH(Store(tmp / "state.db"), Catch::Contains("newer than this anvil understands"));
}

TEST_CASE("ingesting a recipe records a candidate revision with its provenance, once per content", "[state]") {
    TempDir tmp;
    Store store(tmp / "state.db");
    auto doc = recipe_doc("r1");
    auto first = store.ingest_revision(0, doc);
    CHECK(first.created);
    auto again = store.ingest_revision(0, doc);
    CHECK_FALSE(again.created);
    CHECK(again.revision_id == first.revision_id);
    auto rev = store.revision(first.revision_id);
    REQUIRE(rev);
    CHECK(rev->status == Status::candidate);
    CHECK(rev->commit_id == std::string(40, 'a'));
    CHECK(rev->blob_id == std::string(40, 'b'));
    CHECK(rev->sha256 == doc.provenance.sha256);
    CHECK(rev->pinned);
    CHECK(rev->document == doc.to_json());
    auto detail = store.recipe("r1");
    REQUIRE(detail->history.size() == 1);
    CHECK_FALSE(detail->history[0].from.has_value());
    CHECK(detail->history[0].commit_id == std::string(40, 'a'));
    CHECK(detail->history[0].actor == "reconciler");

    auto invalid = registry::parse_document("{", {"x", "", "bad.json", "", ""});
    CHECK_THROWS_WITH(store.ingest_revision(0, invalid), Catch::Contains("bad.json"));
}

TEST_CASE("the store records the fields it is given and never reads them out of the document", "[state]") {
    TempDir tmp;
    Store store(tmp / "state.db");
    RevisionInput in;
    in.recipe_id = "given";
    in.sha256 = std::string(64, 'd');
    in.path = "recipes/given.json";
    in.engine = "vllm";
    in.hardware_id = "h100";
    in.launch_kind = "container";
    in.serving_slot = "edge";
    in.pinned = true;
    in.description = "Searchable Words";
    in.document = R"({"data":{"id":"something-else","serving":{"slot":"default"}}})";  // not consulted
    const auto ingested = store.ingest_revision(0, in);
    CHECK(ingested.created);
    const auto row = store.revision(ingested.revision_id);
    REQUIRE(row);
    CHECK(row->recipe_id == "given");
    CHECK(row->serving_slot == "edge");
    CHECK(row->engine == "vllm");
    CHECK(row->launch_kind == "container");
    CHECK(row->document == nlohmann::json::parse(in.document));
    RecipeFilter words;
    words.text = "searchable";
    CHECK(store.list_recipes(words).total == 1);
    CHECK_FALSE(store.ingest_revision(0, in).created);

    // The registry's document becomes those fields in one place, its serving slot among them.
    auto j = nlohmann::json::parse(test::seed_text("003_"));
    j["data"]["id"] = "slotted";
    j["data"]["serving"]["slot"] = "edge";
    const auto doc = registry::parse_document(j.dump(), {"/srv/registry", std::string(40, 'a'), "recipes/slotted.json", std::string(40, 'b'), ""});
    const auto fields = revision_input(doc);
    CHECK(fields.recipe_id == "slotted");
    CHECK(fields.serving_slot == "edge");
    CHECK(fields.commit_id == std::string(40, 'a'));
    CHECK(nlohmann::json::parse(fields.document) == doc.to_json());
    CHECK(store.revision(store.ingest_revision(0, doc).revision_id)->serving_slot == "edge");
    // The registry reads the slot as a typed field: one that is not a string makes the document invalid.
    j["data"]["serving"]["slot"] = 3;
    const auto bad = registry::parse_document(j.dump(), {"/srv/registry", std::string(40, 'a'), "recipes/slotted.json", std::string(40, 'b'), ""});
    CHECK_FALSE(bad.valid());
    CHECK_THAT(bad.error_lines().front(), Catch::Contains("/data/serving/slot"));
    j["data"]["serving"].erase("slot");
    CHECK(revision_input(registry::parse_document(j.dump(), {"/srv/registry", "", "recipes/slotted.json", "", ""})).serving_slot == "default");
}

TEST_CASE("illegal transitions are refused naming the guard", "[state][lifecycle]") {
    TempDir tmp;
    Store store(tmp / "state.db");
    Id r = store.ingest_revision(0, recipe_doc("r1")).revision_id;
    CHECK_THROWS_WITH(store.transition(move(r, Status::promoted)), Catch::Contains("lifecycle guard") && Catch::Contains("candidate → promoted"));
    store.transition(move(r, Status::qualifying));
    CHECK_THROWS_WITH(store.transition(move(r, Status::validated)),
                      Catch::Contains("evidence guard") && Catch::Contains("identity") && Catch::Contains("determinism"));
    CHECK_THROWS_WITH(store.transition(move(r, Status::failed, "somebody")), Catch::Contains("actor guard"));
    CHECK_THROWS_WITH(store.transition({r, Status::failed, "", "cli", {}, {}, std::nullopt}), Catch::Contains("reason guard"));
    CHECK_THROWS_WITH(store.transition(move(12345, Status::failed)), Catch::Contains("does not exist"));
    CHECK(store.status_of(r) == Status::qualifying);
    store.transition(move(r, Status::failed, "api:token-1"));
    store.transition(move(r, Status::qualifying, "cli"));  // a failed qualification may be retried
    CHECK(store.status_of(r) == Status::qualifying);
}

TEST_CASE("the write generation moves with every committed write and only then", "[state]") {
    TempDir tmp;
    Store store(tmp / "state.db");
    const auto start = store.write_generation();
    Id r = store.ingest_revision(0, recipe_doc("r1")).revision_id;
    const auto after_ingest = store.write_generation();
    CHECK(after_ingest > start);
    CHECK_THROWS(store.transition(move(r, Status::promoted)));  // refused: rolled back, nothing changed
    CHECK(store.write_generation() == after_ingest);
    (void)store.list_recipes({});  // reads never move it
    CHECK(store.write_generation() == after_ingest);
    store.transition(move(r, Status::qualifying));
    CHECK(store.write_generation() == after_ingest + 1);
}

TEST_CASE("a registry commit's sync record and its revisions land in one transaction", "[state]") {
    TempDir tmp;
    Store store(tmp / "state.db");
    const Id source = store.upsert_source("/srv/registry", "main");
    registry::SyncReport report;
    report.mode = registry::SyncReport::Mode::incremental;
    report.commit = std::string(40, 'c');
    report.added = 2;
    const auto a = recipe_doc("r1"), b = recipe_doc("r2");
    const auto before = store.write_generation();
    const auto ingested = store.ingest_revisions(source, {&a, &b}, "reconciler", &report);
    CHECK(store.write_generation() == before + 1);
    CHECK(ingested.size() == 2);
    Connection raw(tmp / "state.db", OpenMode::read_only);
    Statement rows(raw, "SELECT commit_id, mode, added FROM source_commits WHERE source_id = ?");
    rows.bind(1, source);
    REQUIRE(rows.step());
    CHECK(rows.text(0) == report.commit);
    CHECK(rows.text(1) == "incremental");
    CHECK(rows.integer(2) == 2);
    CHECK_FALSE(rows.step());
}

TEST_CASE("only local evidence for every hard gate validates or promotes", "[state][lifecycle]") {
    TempDir tmp;
    Store store(tmp / "state.db");
    Id r = store.ingest_revision(0, recipe_doc("r1")).revision_id;
    store.transition(move(r, Status::qualifying));
    pass_hard_gates(store, r, EvidenceClass::external_prior);
    CHECK_THROWS_WITH(store.transition(move(r, Status::validated)), Catch::Contains("evidence guard"));
    pass_hard_gates(store, r, EvidenceClass::local);
    store.transition(move(r, Status::validated));
    CHECK(store.status_of(r) == Status::validated);
}

TEST_CASE("an unpinned revision can never be promoted", "[state][lifecycle]") {
    TempDir tmp;
    Store store(tmp / "state.db");
    Id r = validated_revision(store, "mutable-image", "002_");
    CHECK_THROWS_WITH(store.promote(r, "try", "reconciler"), Catch::Contains("pinning guard") && Catch::Contains("not pinned by digest"));
    CHECK(store.status_of(r) == Status::validated);
    CHECK_FALSE(store.current_default());
}

TEST_CASE("promotion retires the old default in the same transaction: one promoted per slot", "[state][lifecycle]") {
    TempDir tmp;
    Store store(tmp / "state.db");
    Id a = validated_revision(store, "recipe-a");
    Id b = validated_revision(store, "recipe-b");
    auto first = store.promote(a, "first default", "reconciler");
    CHECK_FALSE(first.retired_revision);
    CHECK(store.current_default()->id == a);

    // Promoting through a plain transition would leave two defaults: the unique index refuses it.
    CHECK_THROWS_WITH(store.transition(move(b, Status::promoted)), Catch::Contains("slot guard"));
    CHECK(store.status_of(b) == Status::validated);

    auto second = store.promote(b, "better by the thresholds", "reconciler");
    CHECK(second.retired_revision == a);
    CHECK(store.status_of(a) == Status::retired);
    CHECK(store.current_default()->id == b);

    // Rollback: the retired default can be promoted again.
    store.promote(a, "rollback: b failed its health check", "reconciler");
    CHECK(store.current_default()->id == a);
    CHECK(store.status_of(b) == Status::retired);
    CHECK(anvil::state::Inspection(store).statuses() == anvil::state::Inspection(store).statuses_from_ledger());
}

TEST_CASE("a new registry revision of a promoted recipe does not inherit its status", "[state][lifecycle]") {
    TempDir tmp;
    Store store(tmp / "state.db");
    Id a = validated_revision(store, "recipe-a");
    store.promote(a, "first default", "reconciler");
    Id a2 = store.ingest_revision(0, recipe_doc("recipe-a", "003_", "a new revision")).revision_id;
    CHECK(a2 != a);
    CHECK(store.status_of(a2) == Status::candidate);
    CHECK(store.status_of(a) == Status::promoted);
    CHECK(store.current_default()->id == a);
    auto listed = store.list_recipes({});
    REQUIRE(listed.items.size() == 1);
    CHECK(listed.items[0].revision_id == a2);
    CHECK(listed.items[0].status == "candidate");
}

TEST_CASE("the ledger is append-only and the status is derived from it", "[state][ledger]") {
    TempDir tmp;
    Store store(tmp / "state.db");
    Id r = store.ingest_revision(0, recipe_doc("r1")).revision_id;
    store.transition(move(r, Status::rejected));
    {
        Connection raw(tmp / "state.db", OpenMode::read_write_create);
        CHECK_THROWS_WITH(raw.exec("UPDATE transitions SET to_status = 'promoted'"), Catch::Contains("append-only"));
        CHECK_THROWS_WITH(raw.exec("DELETE FROM transitions"), Catch::Contains("append-only"));
    }
    CHECK(anvil::state::Inspection(store).statuses() == anvil::state::Inspection(store).statuses_from_ledger());
    auto detail = store.recipe("r1");
    REQUIRE(detail->history.size() == 2);
    CHECK(detail->history[1].from == Status::candidate);
    CHECK(detail->history[1].to == Status::rejected);
}

TEST_CASE("a batch of transitions commits whole or not at all", "[state][ledger]") {
    TempDir tmp;
    Store store(tmp / "state.db");
    Id r = store.ingest_revision(0, recipe_doc("r1")).revision_id;
    CHECK_THROWS(store.transition_batch({move(r, Status::qualifying), move(r, Status::promoted)}));
    CHECK(store.status_of(r) == Status::candidate);
    CHECK(store.recipe("r1")->history.size() == 1);
    auto ids = store.transition_batch({move(r, Status::qualifying), move(r, Status::failed)});
    CHECK(ids.size() == 2);
    CHECK(store.status_of(r) == Status::failed);
}

TEST_CASE("recipes are listed with filters and stable pagination", "[state][queries]") {
    TempDir tmp;
    Store store(tmp / "state.db");
    for (int i = 0; i < 25; ++i) {
        char id[32];
        std::snprintf(id, sizeof id, "recipe-%02d", i);
        auto r = store.ingest_revision(0, recipe_doc(id, i % 5 == 0 ? "002_" : "003_", i == 7 ? "Needle in the description" : "")).revision_id;
        if (i % 3 == 0) store.transition(move(r, Status::rejected));
        if (i % 4 == 0) store.add_verdict({0, r, "feasibility", GateResult::fail, "proven-infeasible", {"needs 4 GPUs"}, {}, ""});
    }
    auto all = store.list_recipes({});
    CHECK(all.total == 25);
    CHECK(all.items.front().id == "recipe-00");

    RecipeFilter page;
    page.limit = 10;
    page.offset = 20;
    auto last = store.list_recipes(page);
    CHECK(last.total == 25);
    REQUIRE(last.items.size() == 5);
    CHECK(last.items[0].id == "recipe-20");

    RecipeFilter rejected;
    rejected.status = "rejected";
    CHECK(store.list_recipes(rejected).total == 9);
    RecipeFilter unpinned;
    unpinned.pinned = false;
    CHECK(store.list_recipes(unpinned).total == 5);
    RecipeFilter engine;
    engine.engine = "sglang";
    CHECK(store.list_recipes(engine).total == 5);
    RecipeFilter verdict;
    verdict.verdict = "proven-infeasible";
    CHECK(store.list_recipes(verdict).total == 7);
    RecipeFilter text;
    text.text = "NEEDLE";
    auto found = store.list_recipes(text);
    REQUIRE(found.total == 1);
    CHECK(found.items[0].id == "recipe-07");
    text.text = "recipe-1";  // ids are searched too: recipe-10 … recipe-19
    CHECK(store.list_recipes(text).total == 10);
    text.text = "*";  // metacharacters are matched literally
    CHECK(store.list_recipes(text).total == 0);
    RecipeFilter hardware;
    hardware.hardware = "rtx-pro-6000-blackwell-96gb";
    hardware.status = "candidate";
    CHECK(store.list_recipes(hardware).total == 16);
}

TEST_CASE("recipe detail holds revisions, evidence, verdicts and history", "[state][queries]") {
    TempDir tmp;
    Store store(tmp / "state.db");
    Id r = validated_revision(store, "r1");
    EvidenceRow bytes;
    bytes.revision_id = r;
    bytes.metric = "peak_memory_bytes";
    bytes.min = registry::Number{std::int64_t{164196608000}};
    bytes.max = registry::Number{std::int64_t{171712992000}};
    bytes.unit = "bytes";
    bytes.status = registry::EvidenceStatus::estimated;
    bytes.source = "feasibility";
    store.add_evidence(bytes);
    auto detail = store.recipe("r1");
    REQUIRE(detail);
    CHECK(detail->revisions.size() == 1);
    CHECK(detail->verdicts.size() == default_hard_gates().size());
    CHECK(detail->history.size() == 3);
    const auto& last = detail->evidence.back();
    CHECK(std::get<std::int64_t>(*last.min) == 164196608000);  // byte counts stay exact integers
    CHECK(std::get<std::int64_t>(*last.max) == 171712992000);
    CHECK(last.status == registry::EvidenceStatus::estimated);
    CHECK(detail->evidence.front().receipt_sha256 == std::string(64, 'c'));
    CHECK_FALSE(store.recipe("nope"));
}

TEST_CASE("engines and events", "[state][queries]") {
    TempDir tmp;
    Store store(tmp / "state.db");
    Id r = store.ingest_revision(0, recipe_doc("r1")).revision_id;
    EngineRow e;
    e.revision_id = r;
    e.driver = "embedded";
    e.pid = 4242;
    e.port = 18080;
    Id engine = store.record_engine_start(e);
    store.record_engine_health(engine, "healthy");
    auto running = store.running_engines();
    REQUIRE(running.size() == 1);
    CHECK(running[0].health == "healthy");
    CHECK(running[0].pid == 4242);
    store.record_engine_stop(engine, 0);
    CHECK(store.running_engines().empty());

    auto feed = store.feed_since({});
    REQUIRE(feed.size() == 1);
    CHECK(feed[0].kind == "transition");
    CHECK(feed[0].subject == "r1");
    CHECK(feed[0].data["to"] == "candidate");
    const FeedCursor cursor = feed.back().cursor;
    store.append_event("sync", "registry", "fetched");
    store.transition(move(r, Status::rejected));
    auto newer = store.feed_since(cursor);
    REQUIRE(newer.size() == 2);
    // Merged by timestamp; within one millisecond the ledger's transition may come first.
    const bool event_first = newer[0].kind != "transition";
    CHECK(newer[event_first ? 0 : 1].message == "fetched");
    CHECK(newer[event_first ? 1 : 0].kind == "transition");
    CHECK(store.feed_since(newer.back().cursor).empty());
    // The cursor travels as text through the API.
    CHECK(FeedCursor::parse(newer[0].cursor.str())->event == newer[0].cursor.event);
    CHECK_FALSE(FeedCursor::parse("12"));
    CHECK_FALSE(FeedCursor::parse("a.b"));
    // Paging through a limit returns everything exactly once.
    auto first = store.feed_since({}, 1);
    REQUIRE(first.size() == 1);
    CHECK(store.feed_since(first[0].cursor, 10).size() == 2);
}

TEST_CASE("disk full: a clear error, and reads go on", "[state][failure]") {
    TempDir tmp;
    auto result = test::run({ANVIL_STATE_TORTURE, "disk-full", tmp.path().string()});
    if (result.exit_code == 77) {
        WARN("skipped: this machine does not permit a private tmpfs mount: " << result.output);
        return;
    }
    INFO(result.output);
    REQUIRE(result.exit_code == 0);
    CHECK_THAT(result.output, Catch::Contains("full") && Catch::Contains("reads still work"));
}

TEST_CASE("read-only file: the store opens, refuses writes clearly, and serves reads", "[state][failure]") {
    TempDir tmp;
    auto result = test::run({ANVIL_STATE_TORTURE, "read-only", tmp.path().string()});
    if (result.exit_code == 77) {
        WARN("skipped: this machine does not permit a private tmpfs mount: " << result.output);
        return;
    }
    INFO(result.output);
    REQUIRE(result.exit_code == 0);
    CHECK_THAT(result.output, Catch::Contains("cannot write") && Catch::Contains("read-only"));
}

TEST_CASE("a document is stored once: a huge description is not copied into the search text and its index", "[state][hardening]") {
    TempDir tmp;
    const std::string description(900 * 1024, 'x');  // under the 1 MiB document limit
    const auto doc = recipe_doc("huge", "003_", "Needle " + description);
    {
        Store store(tmp / "state.db");
        store.ingest_revision(0, doc);
        // Search still finds what the start of the description says, through the bounded index.
        RecipeFilter f;
        f.text = "needle";
        CHECK(store.list_recipes(f).total == 1);
        // A new revision replaces the indexed text: the old words no longer match.
        store.ingest_revision(0, recipe_doc("huge", "003_", "Haystack"));
        CHECK(store.list_recipes(f).total == 0);
        f.text = "haystack";
        CHECK(store.list_recipes(f).total == 1);
        CHECK(anvil::state::Inspection(store).integrity_check() == "ok");
    }
    // Closed, the WAL checkpointed into the file: one copy of the description, not four.
    const auto size = std::filesystem::file_size(tmp / "state.db");
    CHECK(size < description.size() * 3 / 2);
    CHECK(size > description.size());
}

TEST_CASE("bytes the registry went back to make their revision the newest again, a retired one a candidate", "[state][lifecycle][hardening]") {
    TempDir tmp;
    Store store(tmp / "state.db");
    const auto v1 = recipe_doc("r", "003_", "first"), v2 = recipe_doc("r", "003_", "second");
    const Id first = store.ingest_revision(0, v1).revision_id;
    const Id second = store.ingest_revision(0, v2).revision_id;
    // The pass retires the older one ("superseded"): what superseded_open_revisions lists.
    const auto open = store.superseded_open_revisions();
    REQUIRE(open.size() == 1);
    CHECK(open[0].revision_id == first);
    CHECK(open[0].newest_revision_id == second);
    store.transition({first, Status::retired, "superseded by revision " + std::to_string(second), "reconciler", {}, {}, std::nullopt});
    CHECK(store.superseded_open_revisions().empty());

    // A force-push back to the first bytes.
    const auto again = store.ingest_revision(0, v1);
    CHECK_FALSE(again.created);
    CHECK(again.revision_id == first);
    CHECK(store.status_of(first) == Status::candidate);
    CHECK(store.recipe("r")->revisions.front().id == first);
    CHECK(store.list_recipes({}).items.at(0).revision_id == first);
    CHECK(store.list_recipes({}).items.at(0).status == "candidate");
    const auto heads = store.latest_revision_heads();
    REQUIRE(heads.size() == 1);
    CHECK(heads[0].revision_id == first);
    CHECK(heads[0].sha256 == v1.provenance.sha256);
    // The second is now the older open one.
    REQUIRE(store.superseded_open_revisions().size() == 1);
    CHECK(store.superseded_open_revisions()[0].revision_id == second);
    CHECK(anvil::state::Inspection(store).statuses() == anvil::state::Inspection(store).statuses_from_ledger());
}
