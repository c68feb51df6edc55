// A qualification's record: evidence, verdicts, the closing transition and its event land in one
// transaction, or none of it does.
#include <catch2/catch.hpp>

#include <map>

#include "registry/document.hpp"
#include "state/migrations.hpp"
#include "state/inspection.hpp"
#include "state/store.hpp"
#include "test_support.hpp"

using namespace anvil;
using namespace anvil::state;
using anvil::test::TempDir;

namespace {

Id candidate(Store& store, const std::string& id) {
    auto j = nlohmann::json::parse(test::seed_text("003_"));
    j["data"]["id"] = id;
    return store.ingest_revision(0, registry::parse_document(j.dump(), {"/srv/registry", "", "recipes/" + id + ".json", "", ""})).revision_id;
}

EvidenceRow measured(const std::string& metric, double value) {
    EvidenceRow e;
    e.metric = metric;
    e.min = e.max = registry::Number(value);
    e.unit = "ratio";
    e.source = "qualification test";
    e.receipt_sha256 = std::string(64, 'e');
    return e;
}

// Every hard gate measured and judged; `failing` fails instead of passing.
QualificationRecord qualification(Id revision, Status to, const std::string& failing = "") {
    QualificationRecord r;
    r.revision_id = revision;
    r.to = to;
    r.reason = "test qualification";
    r.evidence.push_back(measured("warm_e2e_seconds", 1.5));
    for (const auto& gate : default_hard_gates()) {
        const bool pass = gate != failing;
        r.evidence.push_back(measured("gate_pass_rate:" + gate, pass ? 1.0 : 0.0));
        r.verdicts.push_back({gate, pass ? GateResult::pass : GateResult::fail, std::nullopt, {"test"}, {r.evidence.size() - 1}});
    }
    return r;
}

std::int64_t count(const std::filesystem::path& db, const std::string& table) {
    Connection raw(db, OpenMode::read_only);
    Statement s(raw, "SELECT count(*) FROM " + table);
    s.step();
    return s.integer(0);
}

}  // namespace

TEST_CASE("a qualification's evidence, verdicts and closing transition are one transaction", "[state][qualification]") {
    TempDir tmp;
    const auto file = tmp / "state.db";
    Store store(file);
    const Id r = candidate(store, "q1");
    store.transition({r, Status::qualifying, "test", "reconciler", {}, {}, std::nullopt});

    const auto before = store.write_generation();
    const auto recorded = store.record_qualification(qualification(r, Status::validated));
    CHECK(store.write_generation() == before + 1);
    CHECK(store.status_of(r) == Status::validated);
    CHECK(recorded.evidence_ids.size() == 1 + default_hard_gates().size());
    CHECK(recorded.verdict_ids.size() == default_hard_gates().size());

    const auto detail = store.recipe("q1");
    REQUIRE(detail);
    const auto& closing = detail->history.back();
    CHECK(closing.id == recorded.transition_id);
    CHECK(closing.to == Status::validated);
    CHECK(closing.evidence_ids == recorded.evidence_ids);
    CHECK(closing.verdict_ids == recorded.verdict_ids);
    // Each verdict cites the evidence row it was given by position, under that row's new id.
    REQUIRE(detail->verdicts.size() == default_hard_gates().size());
    for (std::size_t i = 0; i < detail->verdicts.size(); ++i) CHECK(detail->verdicts[i].evidence_ids == std::vector<Id>{recorded.evidence_ids[i + 1]});
    for (const auto& e : detail->evidence) CHECK(e.revision_id == r);
}

TEST_CASE("a refused qualification leaves no evidence or verdict behind", "[state][qualification]") {
    TempDir tmp;
    const auto file = tmp / "state.db";
    Store store(file);
    const Id r = candidate(store, "q2");

    SECTION("the lifecycle refuses: the revision is not qualifying") {
        CHECK_THROWS_AS(store.record_qualification(qualification(r, Status::validated)), TransitionRefused);
        CHECK(store.status_of(r) == Status::candidate);
    }
    SECTION("the evidence guard refuses: a hard gate failed, judged on the verdicts written in the same transaction") {
        store.transition({r, Status::qualifying, "test", "reconciler", {}, {}, std::nullopt});
        CHECK_THROWS_WITH(store.record_qualification(qualification(r, Status::validated, "json")),
                          Catch::Contains("evidence guard") && Catch::Contains("json"));
        CHECK(store.status_of(r) == Status::qualifying);
        CHECK(count(file, "evidence") == 0);
        CHECK(count(file, "verdicts") == 0);
        CHECK(count(file, "events") == 0);
        // The same measurements, recorded as the failure they are, with the feed's event.
        auto failure = qualification(r, Status::failed, "json");
        failure.event = EventInput{"qualification", "q2", "revision failed: json"};
        const auto failed = store.record_qualification(failure);
        CHECK(count(file, "events") == 1);
        CHECK(store.status_of(r) == Status::failed);
        CHECK(count(file, "evidence") == static_cast<std::int64_t>(failed.evidence_ids.size()));
        CHECK(count(file, "verdicts") == static_cast<std::int64_t>(failed.verdict_ids.size()));
    }
    SECTION("a verdict citing evidence that is not in the record") {
        store.transition({r, Status::qualifying, "test", "reconciler", {}, {}, std::nullopt});
        auto record = qualification(r, Status::failed);
        record.verdicts.back().evidence = {record.evidence.size()};
        record.event = EventInput{"qualification", "q2", "never written"};
        CHECK_THROWS_WITH(store.record_qualification(record), Catch::Contains("cites evidence"));
        CHECK(store.status_of(r) == Status::qualifying);
        CHECK(count(file, "events") == 0);  // the event is part of the refused transaction
    }
    SECTION("a qualification ends validated, failed or retired") {
        CHECK_THROWS_WITH(store.record_qualification(qualification(r, Status::promoted)), Catch::Contains("validated, failed or retired"));
    }
    if (store.status_of(r) != Status::failed) {
        CHECK(count(file, "evidence") == 0);
        CHECK(count(file, "verdicts") == 0);
        CHECK(store.recipe("q2")->history.size() == (store.status_of(r) == Status::candidate ? 1u : 2u));
    }
    CHECK(anvil::state::Inspection(store).statuses() == anvil::state::Inspection(store).statuses_from_ledger());
}

TEST_CASE("evidence names the control revision it was compared against", "[state][qualification]") {
    TempDir tmp;
    Store store(tmp / "state.db");
    const Id control = candidate(store, "control");
    const Id r = candidate(store, "compared");
    store.transition({r, Status::qualifying, "test", "reconciler", {}, {}, std::nullopt});
    auto record = qualification(r, Status::validated);
    for (auto& e : record.evidence) e.control_revision_id = control;
    record.evidence.front().control_revision_id.reset();
    store.record_qualification(record);
    const auto detail = store.recipe("compared");
    REQUIRE(detail->evidence.size() == record.evidence.size());
    CHECK_FALSE(detail->evidence.front().control_revision_id);
    for (std::size_t i = 1; i < detail->evidence.size(); ++i) CHECK(detail->evidence[i].control_revision_id == control);
}

TEST_CASE("a ledger of schema version 5 gets the control revision column from its quality_control_revision rows", "[state][migrations]") {
    TempDir tmp;
    const auto file = tmp / "state.db";
    {
        Connection db(file, OpenMode::read_write_create);
        migrate(db, 5);
        db.exec("INSERT INTO recipes (id, latest_revision_id, status, engine, hardware_id, pinned, search_text, first_seen_at) VALUES "
                "('control', 1, 'promoted', 'vllm', 'gpu', 1, 'control', 't'), ('candidate', 2, 'validated', 'vllm', 'gpu', 1, 'candidate', 't')");
        db.exec("INSERT INTO recipe_revisions (id, recipe_id, sha256, commit_id, path, blob_id, engine, hardware_id, launch_kind, serving_slot, "
                "pinned, unpinned_reasons, document, created_at) VALUES "
                "(1, 'control', 'a', 'c', 'recipes/control.json', 'b', 'vllm', 'gpu', 'docker', 'default', 1, '[]', '{}', 't'), "
                "(2, 'candidate', 'b', 'c', 'recipes/candidate.json', 'b', 'vllm', 'gpu', 'docker', 'default', 1, '[]', '{}', 't')");
        db.exec("INSERT INTO transitions (id, revision_id, from_status, to_status, reason, evidence_ids, verdict_ids, actor, created_at) VALUES "
                "(1, 1, NULL, 'candidate', 'ingested', '[]', '[]', 'reconciler', 't'), (2, 2, NULL, 'candidate', 'ingested', '[]', '[]', 'reconciler', 't')");
        db.exec("INSERT INTO revision_status VALUES (1, 'candidate', 'default', 1), (2, 'candidate', 'default', 2)");
        // Two qualifications of revision 2 as the runner wrote them: the first compared with revision 1
        // (its quality_control_revision row, the id as a real), the second with no control; and a prior.
        const std::string columns = "INSERT INTO evidence (id, revision_id, metric, value_min, value_max, unit, status, class, source, "
                                    "observed_at, receipt_sha256, receipt_path, created_at) VALUES ";
        db.exec(columns + "(1, 2, 'relative_quality_loss', 0.01, 0.01, 'ratio', 'measured', 'local', 'qualification A', 't', 'aa', 'a.json', 't'), "
                          "(2, 2, 'quality_control_revision', 1.0, 1.0, 'revision', 'measured', 'local', 'qualification A', 't', 'aa', 'a.json', 't'), "
                          "(3, 2, 'gate_pass_rate:json', 1.0, 1.0, 'ratio', 'measured', 'local', 'qualification A', 't', 'aa', 'a.json', 't'), "
                          "(4, 2, 'gate_pass_rate:json', 1.0, 1.0, 'ratio', 'measured', 'local', 'qualification B', 't', 'bb', 'b.json', 't'), "
                          "(5, 2, 'warm_e2e_seconds', 2.0, 2.0, 's', 'measured', 'external-prior', 'qualification A', 't', 'aa', NULL, 't'), "
                          "(6, 1, 'gate_pass_rate:json', 1.0, 1.0, 'ratio', 'measured', 'local', 'qualification C', 't', 'cc', 'c.json', 't')");
    }
    Store store(file);
    CHECK(store.schema_version() == current_schema_version());
    const auto detail = store.recipe("candidate");
    REQUIRE(detail);
    std::map<Id, std::optional<Id>> control;
    for (const auto& e : detail->evidence) control[e.id] = e.control_revision_id;
    CHECK(control.at(1) == Id{1});
    CHECK(control.at(2) == Id{1});  // the old row stays, and names its control too
    CHECK(control.at(3) == Id{1});
    CHECK_FALSE(control.at(4));  // another qualification, with no control
    CHECK_FALSE(control.at(5));  // not local
    CHECK(detail->evidence.size() == 5);
    CHECK_FALSE(store.recipe("control")->evidence.front().control_revision_id);
    CHECK(anvil::state::Inspection(store).integrity_check() == "ok");
}
