// The feasibility calculator: seed 004's acceptance figures, one test per verdict path, the JSON
// result and the `anvil feasibility` command.
#include <catch2/catch.hpp>

#include <map>
#include <memory>

#include "registry/document.hpp"
#include "registry/feasibility.hpp"
#include "registry/feasibility_json.hpp"
#include "test_feasibility_input.hpp"
#include "test_support.hpp"

using namespace anvil::registry;

namespace {

FeasibilityInput parse_input(const json& doc) { return anvil::test::feasibility_input(doc); }

FeasibilityInput seed_004() { return parse_input(json::parse(anvil::test::seed_text("004_"))); }

const CandidateResult& find(const FeasibilityResult& r, std::string_view id) {
    for (const auto& c : r.candidates)
        if (c.id == id) return c;
    FAIL("no candidate " << id);
    return r.candidates.front();
}

json var(std::int64_t value, const char* status = "measured") {
    return {{"value", value}, {"unit", "bytes"}, {"status", status}, {"source", "test"}};
}
json ratio(double value, const char* status = "measured") {
    return {{"value", value}, {"unit", "ratio"}, {"status", status}, {"source", "test"}};
}
json range(std::int64_t min, std::int64_t max, const char* status = "estimated") {
    return {{"min", min}, {"max", max}, {"unit", "bytes"}, {"status", status}, {"source", "test"}};
}
json unknown_var() { return {{"unit", "bytes"}, {"status", "unknown"}, {"notes", "not measured yet"}}; }

// A small machine: 1000 tokens needed, 100000 bytes of VRAM with a 1000-byte physical reserve
// and a 9000-byte policy reserve, so 99000 physical and 90000 policy bytes available.
json small_document() {
    return {
        {"schema", "anvil-serving.recipe-feasibility-input/v1"},
        {"campaign", "test"},
        {"requirements",
         {{"tokens", {{"prompt", var(900, "assumed")}, {"output_reserve", var(100, "assumed")}}},
          {"concurrency", var(1, "assumed")},
          {"physical_vram_bytes", var(100000)},
          {"vram_reserves",
           {{"idle", {{"kind", "physical"}, {"variable", var(1000)}}}, {"headroom", {{"kind", "policy"}, {"variable", var(9000, "assumed")}}}}},
          {"thresholds",
           {{"min_deterministic_pass_rate", ratio(1.0, "assumed")},
            {"max_relative_quality_loss", ratio(0.03, "assumed")},
            {"min_warm_e2e_gain", ratio(0.25, "assumed")},
            {"min_tasks_per_hour_ratio", ratio(1.0, "assumed")}}}}},
        {"candidates", json::array()},
    };
}

// Passes context and memory with proof; every behaviour metric measured and passing.
json good_candidate() {
    return {
        {"id", "good"},
        {"runtime_context_limit_tokens", var(4096, "confirmed")},
        {"measured_max_stable_context_tokens", var(2048)},
        {"resident_components", {{"weights", var(50000)}}},
        {"per_sequence_components", {{"state", var(1000)}}},
        {"per_token_components", {{"kv", var(10)}}},
        {"kv_token_multiplier", var(1, "confirmed")},
        {"metrics",
         {{"deterministic_pass_rate", ratio(1.0)},
          {"quality_score", ratio(97.0)},
          {"reference_quality_score", ratio(100.0)},
          {"warm_e2e_seconds", ratio(6.0)},
          {"no_spec_warm_e2e_seconds", ratio(10.0)},
          {"successful_tasks_per_hour", ratio(12.0)},
          {"reference_tasks_per_hour", ratio(10.0)}}},
        {"hard_failures", json::array()},
    };
}

// A result with the input it borrows from.
struct Evaluated {
    std::unique_ptr<const FeasibilityInput> input;
    FeasibilityResult result;
    const CandidateResult& candidate() const { return result.candidates.at(0); }
    std::span<const VariableRef> missing_evidence() const { return result.missing_evidence(candidate()); }
    std::span<const LoadBearingUnknown> load_bearing_unknowns() const { return result.load_bearing_unknowns(candidate()); }
};

// Evaluates `small_document()` with one candidate, after `edit` has changed it.
template <typename Edit>
Evaluated evaluate_one(Edit edit) {
    json doc = small_document();
    json c = good_candidate();
    edit(doc, c);
    doc["candidates"].push_back(c);
    Evaluated e{std::make_unique<const FeasibilityInput>(parse_input(doc)), {}};
    e.result = evaluate_feasibility(*e.input);
    return e;
}

Verdict verdict_of(const Evaluated& e) { return e.candidate().verdict; }

}  // namespace

TEST_CASE("seed 004: T_req and available bytes follow from the document's own numbers", "[feasibility]") {
    const FeasibilityInput in = seed_004();
    const FeasibilityResult r = evaluate_feasibility(in);
    CHECK(r.t_req == IntInterval::exact(258192));
    CHECK(r.physical_available == IntInterval::exact(205244071936));
    CHECK(r.policy_available == IntInterval::exact(195019721933));
    CHECK(r.errors.empty());
}

TEST_CASE("seed 004: the Purtell K3 candidate survives on paper with exact demand, margin and T_max", "[feasibility]") {
    const FeasibilityInput in = seed_004();
    const FeasibilityResult r = evaluate_feasibility(in);
    const auto& c = find(r, "purtell-k3-dflash2-k5-fp8-1m-vision");
    CHECK(c.verdict == Verdict::benchmark_survivor);
    CHECK(c.demand == IntInterval{164196608000, 171712992000});
    CHECK(c.policy_margin == IntInterval{23306729933, 30823113933});
    CHECK(c.policy_t_max == IntInterval{1154604, 1542488});
    CHECK(c.axis(AxisName::memory).status == AxisStatus::pass);
    CHECK(c.axis(AxisName::context_limit).status == AxisStatus::pass);
    CHECK(c.axis(AxisName::stable_context).status == AxisStatus::pass);
    for (AxisName a : {AxisName::deterministic_correctness, AxisName::quality, AxisName::warm_e2e_speed, AxisName::tasks_per_hour}) {
        CHECK(c.axis(a).status == AxisStatus::unknown);
        CHECK(c.axis(a).projected_status == AxisStatus::unknown);
    }
    CHECK(r.missing_evidence(c).size() == 7);  // every metric: each note says what to measure
    CHECK(c.reasons.back() == "only local qualification authorizes promotion");
}

TEST_CASE("seed 004: the Brandon 98k candidate is proven infeasible by its context limit", "[feasibility]") {
    const FeasibilityInput in = seed_004();
    const FeasibilityResult r = evaluate_feasibility(in);
    const auto& c = find(r, "brandon-v84-k4-dflash2-vision-98k");
    CHECK(c.verdict == Verdict::proven_infeasible);
    REQUIRE(c.reasons.size() == 1);
    CHECK(c.reasons[0] == "runtime context limit 98304 < T_req 258192 tokens (confirmed)");
    // Ruled out: its unknown KV size is missing evidence, but nothing to measure would change the verdict.
    CHECK(r.load_bearing_unknowns(c).empty());
    CHECK_FALSE(r.missing_evidence(c).empty());
}

TEST_CASE("seed 004: candidates with hard failures are empirically disqualified, the failures as reasons", "[feasibility]") {
    const FeasibilityInput in = seed_004();
    const FeasibilityResult r = evaluate_feasibility(in);
    for (const char* id : {"cardillo-k4-adaptive-mtp-replayssm-262k", "0xsero-glm53-flash-exl3-3bpw"}) {
        const auto& c = find(r, id);
        CHECK(c.verdict == Verdict::empirically_disqualified);
        CHECK(c.reasons == in.candidates[c.index].hard_failures);
    }
}

TEST_CASE("seed 004: the document through parse_document gives the same verdicts", "[feasibility]") {
    const Document doc = parse_document(anvil::test::seed_text("004_"), Provenance{"seeds", "", "004.json", "", ""});
    REQUIRE(doc.valid());
    const auto* in = std::get_if<FeasibilityInput>(&doc.body);
    REQUIRE(in);
    CHECK(evaluate_feasibility(*in).candidates.size() == 4);
}

// --- one test per verdict path -------------------------------------------------------------

TEST_CASE("verdict: every axis passing with proof is math-qualified, never promotion", "[feasibility]") {
    const auto r = evaluate_one([](json&, json&) {});
    const auto& c = r.candidate();
    CHECK(c.verdict == Verdict::math_qualified);
    for (const auto& a : c.axes) CHECK(a.status == AxisStatus::pass);
    CHECK(c.reasons.back() == "only local qualification authorizes promotion");
    CHECK(c.demand == IntInterval::exact(50000 + 1000 + 1000 * 10));
    CHECK(c.policy_t_max == IntInterval::exact((90000 - 50000 - 1000) / 10));
    CHECK(c.physical_t_max == IntInterval::exact((99000 - 50000 - 1000) / 10));
}

TEST_CASE("verdict: a hard failure is empirically-disqualified even when everything else passes", "[feasibility]") {
    const auto r = evaluate_one([](json&, json& c) { c["hard_failures"] = {"degenerate output on the tool gate"}; });
    CHECK(verdict_of(r) == Verdict::empirically_disqualified);
    CHECK(r.candidate().reasons == std::vector<std::string>{"degenerate output on the tool gate"});
}

TEST_CASE("verdict: a measured stable-context failure is empirically-disqualified", "[feasibility]") {
    const auto r = evaluate_one([](json&, json& c) { c["measured_max_stable_context_tokens"] = var(512, "measured"); });
    CHECK(verdict_of(r) == Verdict::empirically_disqualified);
    CHECK(r.candidate().reasons[0] == "measured stable context 512 < T_req 1000 tokens (measured)");
}

TEST_CASE("verdict: an estimated or assumed stable-context failure is modeled-infeasible", "[feasibility]") {
    const auto r = evaluate_one([](json&, json& c) { c["measured_max_stable_context_tokens"] = range(100, 900); });
    CHECK(verdict_of(r) == Verdict::modeled_infeasible);
}

TEST_CASE("verdict: a stable-context failure on unknown evidence is unresolved", "[feasibility]") {
    const auto r = evaluate_one([](json&, json& c) {
        c["measured_max_stable_context_tokens"] = {{"max", 900}, {"unit", "tokens"}, {"status", "unknown"}, {"notes", "a guess"}};
    });
    CHECK(verdict_of(r) == Verdict::unresolved);
    CHECK(r.candidate().axis(AxisName::stable_context).status == AxisStatus::fail);
}

TEST_CASE("verdict: a context-limit failure is classed by the limit's own evidence", "[feasibility]") {
    CHECK(verdict_of(evaluate_one([](json&, json& c) { c["runtime_context_limit_tokens"] = var(999, "confirmed"); })) ==
          Verdict::proven_infeasible);
    CHECK(verdict_of(evaluate_one([](json&, json& c) { c["runtime_context_limit_tokens"] = var(999, "assumed"); })) ==
          Verdict::modeled_infeasible);
    CHECK(verdict_of(evaluate_one([](json&, json& c) {
              c["runtime_context_limit_tokens"] = {{"max", 999}, {"unit", "tokens"}, {"status", "unknown"}, {"notes", "n"}};
          })) == Verdict::unresolved);
}

TEST_CASE("verdict: a physical memory failure on proof is proven-infeasible", "[feasibility]") {
    const auto r = evaluate_one([](json& doc, json& c) {
        for (auto* v : {&doc["requirements"]["tokens"]["prompt"], &doc["requirements"]["tokens"]["output_reserve"],
                        &doc["requirements"]["concurrency"], &doc["requirements"]["vram_reserves"]["headroom"]["variable"]})
            (*v)["status"] = "measured";
        c["resident_components"]["weights"] = var(99000);
    });
    const auto& c = r.candidate();
    CHECK(c.axis(AxisName::memory).status == AxisStatus::physical_fail);
    CHECK(c.verdict == Verdict::proven_infeasible);
    CHECK(c.reasons[0] == "demand 110000 bytes exceeds physical available 99000 bytes");
    CHECK(c.physical_margin == IntInterval::exact(-11000));
    CHECK(c.physical_t_max == IntInterval::exact(0));  // the fixed demand alone exceeds what is available
}

TEST_CASE("verdict: a physical memory failure resting on an assumption is modeled-infeasible", "[feasibility]") {
    // The small document's token requirement is assumed, as seed 004's is.
    const auto r = evaluate_one([](json&, json& c) { c["resident_components"]["weights"] = var(99000); });
    CHECK(verdict_of(r) == Verdict::modeled_infeasible);
    CHECK(r.candidate().reasons[1].starts_with("memory inputs estimated or assumed: "));
    CHECK(r.candidate().reasons[1].find("/requirements/tokens/prompt (assumed)") != std::string::npos);
}

TEST_CASE("verdict: a physical memory failure with an unbounded input is unresolved", "[feasibility]") {
    const auto r = evaluate_one([](json&, json& c) {
        c["resident_components"]["weights"] = var(99000);
        c["per_token_components"]["extra"] = {{"min", 1}, {"unit", "bytes"}, {"status", "assumed"}, {"source", "floor only"}};
    });
    CHECK(r.candidate().axis(AxisName::memory).status == AxisStatus::physical_fail);
    CHECK(verdict_of(r) == Verdict::unresolved);
    CHECK(r.candidate().reasons[1] == "memory inputs unknown or unbounded: /candidates/0/per_token_components/extra");
}

TEST_CASE("verdict: demand above policy but within physical capacity is policy-infeasible", "[feasibility]") {
    const auto r = evaluate_one([](json&, json& c) { c["resident_components"]["weights"] = var(85000); });
    CHECK(r.candidate().axis(AxisName::memory).status == AxisStatus::policy_fail);
    CHECK(verdict_of(r) == Verdict::policy_infeasible);
    CHECK(r.candidate().reasons[0] == "demand 96000 bytes exceeds policy available 90000 bytes");
}

TEST_CASE("verdict: a policy failure with an unknown memory input is unresolved", "[feasibility]") {
    const auto r = evaluate_one([](json&, json& c) {
        c["resident_components"]["weights"] = var(85000);
        c["resident_components"]["graphs"] = {{"min", 100}, {"unit", "bytes"}, {"status", "unknown"}, {"notes", "not profiled"}};
    });
    CHECK(r.candidate().axis(AxisName::memory).status == AxisStatus::policy_fail);
    CHECK(verdict_of(r) == Verdict::unresolved);
}

TEST_CASE("verdict: a measured behaviour failure is requirements-disqualified", "[feasibility]") {
    const auto r = evaluate_one([](json&, json& c) { c["metrics"]["quality_score"] = ratio(90.0); });
    CHECK(r.candidate().axis(AxisName::quality).status == AxisStatus::fail);
    CHECK(verdict_of(r) == Verdict::requirements_disqualified);
    CHECK(r.candidate().reasons[0].starts_with("quality: relative quality loss"));
}

TEST_CASE("verdict: an unknown context limit or memory axis leaves the candidate unresolved", "[feasibility]") {
    const auto no_limit = evaluate_one([](json&, json& c) { c.erase("runtime_context_limit_tokens"); });
    CHECK(verdict_of(no_limit) == Verdict::unresolved);
    CHECK(no_limit.candidate().reasons[0] == "context_limit unknown: /candidates/0/runtime_context_limit_tokens (absent)");

    const auto straddle = evaluate_one([](json&, json& c) { c["resident_components"]["weights"] = range(30000, 85000); });
    CHECK(straddle.candidate().axis(AxisName::memory).status == AxisStatus::unknown);
    CHECK(verdict_of(straddle) == Verdict::unresolved);
    CHECK(straddle.candidate().reasons[0] == "memory unknown: the bounds straddle the requirement");
}

TEST_CASE("verdict: a stable context never measured or straddling T_req asks for the measurement, holding nothing open", "[feasibility]") {
    const auto no_stable = evaluate_one([](json&, json& c) { c.erase("measured_max_stable_context_tokens"); });
    CHECK(no_stable.candidate().axis(AxisName::stable_context).status == AxisStatus::not_measured);
    CHECK(verdict_of(no_stable) == Verdict::math_qualified);
    CHECK(no_stable.candidate().reasons ==
          std::vector<std::string>{"the runtime limit, memory and every behaviour axis pass on paper",
                                   "stable context not measured: measure /candidates/0/measured_max_stable_context_tokens at T_req 1000 tokens",
                                   "only local qualification authorizes promotion"});

    const auto straddle = evaluate_one([](json&, json& c) { c["measured_max_stable_context_tokens"] = range(500, 2000); });
    CHECK(straddle.candidate().axis(AxisName::stable_context).status == AxisStatus::unknown);
    CHECK(verdict_of(straddle) == Verdict::math_qualified);
    CHECK(straddle.candidate().reasons[1] == "stable_context unknown: the bounds straddle the requirement");
}

TEST_CASE("verdict: behaviour that passes only on estimates is a benchmark-survivor", "[feasibility]") {
    const auto r = evaluate_one([](json&, json& c) {
        c["metrics"]["warm_e2e_seconds"] = {{"min", 5.0}, {"max", 6.0}, {"unit", "seconds"}, {"status", "estimated"}, {"source", "prior"}};
    });
    const auto& a = r.candidate().axis(AxisName::warm_e2e_speed);
    CHECK(a.status == AxisStatus::unknown);
    CHECK(a.projected_status == AxisStatus::pass);
    CHECK(verdict_of(r) == Verdict::benchmark_survivor);
    // An estimate that would fail still cannot disqualify: it is only a projection.
    const auto f = evaluate_one([](json&, json& c) { 
        c["metrics"]["quality_score"] = {{"min", 40.0}, {"max", 50.0}, {"unit", "score"}, {"status", "estimated"}, {"source", "prior"}};
    });
    CHECK(f.candidate().axis(AxisName::quality).projected_status == AxisStatus::fail);
    CHECK(verdict_of(f) == Verdict::benchmark_survivor);
}

// --- rules across paths ----------------------------------------------------------------------

TEST_CASE("a missing KV multiplier is unknown, never 1", "[feasibility]") {
    const auto r = evaluate_one([](json&, json& c) { c.erase("kv_token_multiplier"); });
    const auto& c = r.candidate();
    CHECK(c.demand == IntInterval{});
    CHECK(c.policy_t_max == IntInterval{});
    CHECK(c.axis(AxisName::memory).status == AxisStatus::unknown);
    CHECK(c.verdict == Verdict::unresolved);
    bool named = false;
    for (const auto& u : r.load_bearing_unknowns())
        named = named || (u.axis == AxisName::memory && u.variable.slot == Slot::kv_multiplier && u.reason == UnknownReason::absent);
    CHECK(named);
}

TEST_CASE("an unknown component is load-bearing for memory and listed as missing evidence with its notes", "[feasibility]") {
    const auto r = evaluate_one([](json&, json& c) { c["per_token_components"]["draft_kv"] = unknown_var(); });
    const auto& c = r.candidate();
    CHECK(c.axis(AxisName::memory).status == AxisStatus::unknown);
    REQUIRE(r.missing_evidence().size() == 1);
    CHECK(pointer(r.missing_evidence()[0], 0) == "/candidates/0/per_token_components/draft_kv");
    CHECK(r.missing_evidence()[0].variable->notes == "not measured yet");
    REQUIRE(r.load_bearing_unknowns().size() == 1);
    CHECK(r.load_bearing_unknowns()[0].reason == UnknownReason::status_unknown);
}

TEST_CASE("a missing bound stays missing through demand, margins and T_max", "[feasibility]") {
    const auto r = evaluate_one([](json&, json& c) {
        c["per_token_components"]["kv"] = {{"min", 10}, {"unit", "bytes"}, {"status", "assumed"}, {"source", "floor"}};
    });
    const auto& c = r.candidate();
    CHECK(c.demand == IntInterval{61000, std::nullopt});
    CHECK(c.policy_margin == IntInterval{std::nullopt, 29000});
    CHECK(c.policy_t_max == IntInterval{std::nullopt, 3900});
}

TEST_CASE("a 3 % quality loss meets a 3 % limit despite binary rounding", "[feasibility]") {
    const auto r = evaluate_one([](json&, json&) {});
    CHECK(r.candidate().axis(AxisName::quality).status == AxisStatus::pass);
}

TEST_CASE("a missing threshold leaves its behaviour axis unknown, naming the threshold", "[feasibility]") {
    const auto r = evaluate_one([](json& doc, json&) { doc["requirements"]["thresholds"].erase("min_tasks_per_hour_ratio"); });
    const auto& c = r.candidate();
    CHECK(c.axis(AxisName::tasks_per_hour).status == AxisStatus::unknown);
    CHECK(c.verdict == Verdict::benchmark_survivor);
    REQUIRE(r.load_bearing_unknowns().size() == 1);
    CHECK(pointer(r.load_bearing_unknowns()[0].variable, 0) == "/requirements/thresholds/min_tasks_per_hour_ratio");
}

TEST_CASE("byte arithmetic beyond 64 bits leaves memory unknown and says so", "[feasibility]") {
    const auto r = evaluate_one([](json&, json& c) {
        c["per_token_components"]["kv"] = var(std::int64_t{1} << 62);
        c["kv_token_multiplier"] = var(4, "confirmed");
    });
    const auto& c = r.candidate();
    CHECK(c.axis(AxisName::memory).status == AxisStatus::unknown);
    CHECK(c.verdict == Verdict::unresolved);
    CHECK(c.arithmetic_error.starts_with("memory: "));

    const auto huge = evaluate_one([](json&, json& c) { c["runtime_context_limit_tokens"]["value"] = 1e30; });
    CHECK(huge.candidate().axis(AxisName::context_limit).status == AxisStatus::unknown);
    CHECK(huge.candidate().axis(AxisName::stable_context).status == AxisStatus::pass);
    CHECK(huge.candidate().arithmetic_error.starts_with("context_limit: "));
    CHECK(huge.candidate().verdict == Verdict::unresolved);
}

TEST_CASE("fractional byte figures widen outward to whole bytes", "[feasibility]") {
    EvidenceVariable v;
    v.min = Number{10.2};
    v.max = Number{11.7};
    CHECK(to_int_interval(v) == IntInterval{10, 12});
    EvidenceVariable w;
    w.value = Number{2.5};
    CHECK(to_int_interval(w) == IntInterval{2, 3});
}

// --- the JSON result and the command -----------------------------------------------------------

TEST_CASE("the JSON result carries the schema, figures, classes and a ledger of every variable", "[feasibility]") {
    const FeasibilityInput in = seed_004();
    const json out = json::parse(feasibility_json(evaluate_feasibility(in)));
    CHECK(out["schema"] == "anvil-serving.recipe-feasibility-result/v1");
    CHECK(out["campaign"] == "glm53-k3-dflash2-dual-pro6000-wsl2-default");
    CHECK(out["T_req"]["min"] == 258192);
    CHECK(out["policy_available_bytes"]["max"] == 195019721933);
    CHECK(out["equations"].contains("demand"));
    const json& purtell = out["candidates"][0];
    CHECK(purtell["class"] == "benchmark-survivor");
    CHECK(purtell["policy_margin_bytes"]["min"] == 23306729933);
    CHECK(purtell["T_max"]["policy"]["max"] == 1542488);
    CHECK(purtell["axes"]["quality"]["status"] == "unknown");
    CHECK(purtell["axes"]["quality"]["projected_status"] == "unknown");
    CHECK(purtell["axes"]["quality"]["actual"]["min"].is_null());
    CHECK(out["candidates"][1]["T_max"]["policy"]["min"].is_null());  // unknown per-token bytes: no T_max
    const json& ledger = out["ledger"];
    CHECK(ledger["/requirements/tokens/prompt"]["value"] == 250000);
    CHECK(ledger["/requirements/vram_reserves/idle_gpu_allocations/variable"]["status"] == "measured");
    CHECK(ledger["/candidates/0/per_token_components/heterogeneous_target_draft_request_cache_proxy"]["max"] == 13000);
    CHECK(ledger["/candidates/0/metrics/quality_score"]["notes"] == "Run the matched local high-reasoning suite.");
    // A variable the document lacks is missing evidence, not a ledger entry.
    CHECK_FALSE(ledger.contains("/candidates/1/measured_max_stable_context_tokens"));
    CHECK(out["candidates"][1]["missing_evidence"][0] ==
          json({{"variable", "/candidates/1/measured_max_stable_context_tokens"}, {"absent", true}}));
    CHECK(purtell["axes"]["memory"]["actual"] == json({{"min", 164196608000}, {"max", 171712992000}}));
    // What each axis is compared with is the same for every candidate, so it is stated once.
    CHECK(out["axes"]["memory"]["unit"] == "bytes");
    CHECK(out["axes"]["memory"]["comparison"] == "at-most");
    CHECK(out["axes"]["memory"]["required"] == json({{"min", 195019721933}, {"max", 195019721933}}));
    CHECK(out["axes"]["context_limit"]["required"]["min"] == 258192);
    CHECK(out["axes"]["quality"]["required"]["max"] == 0.03);
}

TEST_CASE("names from the document are escaped in JSON and in pointers: appending keeps what was there", "[feasibility]") {
    const auto r = evaluate_one([](json&, json& c) {
        c["id"] = "odd \"id\"\n\ttab\u0001";
        c["resident_components"]["a/b~c \"d\""] = var(10);
    });
    std::string out = "prefix:";
    append_feasibility_json(out, r.result);
    REQUIRE(out.starts_with("prefix:"));
    const json parsed = json::parse(out.substr(7));
    CHECK(parsed["candidates"][0]["id"] == "odd \"id\"\n\ttab\u0001");
    CHECK(parsed["ledger"]["/candidates/0/resident_components/a~1b~0c \"d\""]["value"] == 10);
}

TEST_CASE("the JSON writer grows its buffer for large results", "[feasibility]") {
    json doc = small_document();
    for (int i = 0; i < 300; ++i) {
        json c = good_candidate();
        c["id"] = "c" + std::to_string(i);
        doc["candidates"].push_back(c);
    }
    const FeasibilityInput in = parse_input(doc);
    std::string out;  // no reservation: the writer starts small and doubles
    append_feasibility_json(out, evaluate_feasibility(in));
    REQUIRE(out.size() > 200000);
    const json parsed = json::parse(out);
    CHECK(parsed["candidates"].size() == 300);
    CHECK(parsed["candidates"][299]["class"] == "math-qualified");
}

TEST_CASE("the streamed JSON is byte for byte the appended JSON, whatever the window", "[feasibility]") {
    json doc = small_document();
    for (int i = 0; i < 200; ++i) {
        json c = good_candidate();
        c["id"] = "c" + std::to_string(i) + std::string(static_cast<std::size_t>(i) * 40, 'x');  // some ids longer than a window
        doc["candidates"].push_back(c);
    }
    const FeasibilityInput in = parse_input(doc);
    const FeasibilityResult r = evaluate_feasibility(in);
    const std::string whole = feasibility_json(r);
    for (std::size_t window : {std::size_t{1}, std::size_t{4096}, std::size_t{65536}, std::size_t{1} << 20}) {
        std::string streamed;
        std::size_t pieces = 0;
        write_feasibility_json(r, [&](std::string_view piece) { streamed += piece, ++pieces; }, window);
        CHECK(streamed == whole);
        if (window <= 4096) CHECK(pieces > 10);  // it did stream
    }
}

namespace {
anvil::test::ProcessResult run_cli(std::vector<std::string> arguments) {
    arguments.insert(arguments.begin(), {ANVIL_CLI, "feasibility"});
    return anvil::test::run(arguments);
}
}  // namespace

TEST_CASE("`anvil feasibility` prints seed 004's result as JSON and as a table", "[feasibility][cli]") {
    const std::string seed = anvil::test::seed_path("004_");
    const auto json_run = run_cli({seed, "--format", "json"});
    REQUIRE(json_run.exit_code == 0);
    const json out = json::parse(json_run.output);
    CHECK(out["schema"] == "anvil-serving.recipe-feasibility-result/v1");
    CHECK(out["physical_available_bytes"]["min"] == 205244071936);
    std::map<std::string, std::string> classes;
    for (const auto& c : out["candidates"]) classes[c["id"]] = c["class"];
    CHECK(classes["purtell-k3-dflash2-k5-fp8-1m-vision"] == "benchmark-survivor");
    CHECK(classes["brandon-v84-k4-dflash2-vision-98k"] == "proven-infeasible");
    CHECK(classes["cardillo-k4-adaptive-mtp-replayssm-262k"] == "empirically-disqualified");
    CHECK(classes["0xsero-glm53-flash-exl3-3bpw"] == "empirically-disqualified");

    // Compact by default: one line; --pretty prints the same document indented.
    CHECK(json_run.output.find('\n') == json_run.output.size() - 1);
    const auto pretty = run_cli({seed, "--format", "json", "--pretty"});
    REQUIRE(pretty.exit_code == 0);
    CHECK(json::parse(pretty.output) == out);
    CHECK(pretty.output.starts_with("{\n  \"schema\": \"anvil-serving.recipe-feasibility-result/v1\",\n  \"campaign\": "));

    const auto table = run_cli({seed});
    CHECK(table.exit_code == 0);
    CHECK(table.output.find("benchmark-survivor") != std::string::npos);
    CHECK(table.output.find("T_req 258192") != std::string::npos);
}

TEST_CASE("`anvil feasibility` rejects an invalid document and a bad usage", "[feasibility][cli]") {
    anvil::test::TempDir dir;
    json doc = small_document();
    doc["requirements"].erase("concurrency");
    anvil::test::write_file(dir / "bad.json", doc.dump());
    const auto bad = run_cli({(dir / "bad.json").string()});
    CHECK(bad.exit_code == 1);
    CHECK(bad.output.find("/requirements/concurrency") != std::string::npos);
    CHECK(run_cli({}).exit_code == 2);
    CHECK(run_cli({anvil::test::seed_path("004_"), "--format", "yaml"}).exit_code == 2);
    const auto pretty_table = run_cli({anvil::test::seed_path("004_"), "--pretty"});
    CHECK(pretty_table.exit_code == 2);
    CHECK(pretty_table.output.find("--pretty indents JSON: give it with --format json") != std::string::npos);
    const auto limit = run_cli({anvil::test::seed_path("004_"), "--max-document-bytes", "100"});
    CHECK(limit.exit_code == 1);  // the seed is larger: invalid, with the limit named
    CHECK(run_cli({anvil::test::seed_path("004_"), "--max-document-bytes", "-5"}).exit_code == 2);
    CHECK(run_cli({(dir / "missing.json").string()}).exit_code == 2);
}
