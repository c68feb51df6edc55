// The draft's acceptance in qualification: anvil-engine's anvil_engine_draft_* counters read from
// its /metrics text, the difference between the scrapes around the measurements, the journal notes
// when a scrape is missing, a real speculative engine qualified with the figures recorded, one
// without a draft with none at all, and a promotion policy that reads none of them; and the GPU
// memory gauge read from the same exposition.
#include <catch2/catch.hpp>

#include <httplib.h>

#include "daemon/qualify/draft_acceptance.hpp"
#include "daemon/qualify/metrics_exposition.hpp"
#include "daemon/qualify/promotion_policy.hpp"
#include "daemon/qualify/qualification.hpp"
#include "engine/metrics.hpp"
#include "test_qualify_engine.hpp"
#include "test_support.hpp"

using namespace anvil::qualify;
using namespace anvil::qualify::detail;
using anvil::test::TempDir;
using anvil::test::qualify::QualifyingEngine;
using anvil::test::qualify::quick_plan;
using nlohmann::json;

namespace {

// What anvil-engine's /metrics says with a draft (engine/metrics.cpp), with the figures given.
std::string exposition(int proposed, int accepted, int verifications, const std::string& model = "anvil-tiny-llama") {
    const std::string l = "{model=\"" + model + "\",draft=\"ngram\"}";
    return "# HELP anvil_engine_generation_tokens_total Tokens generated.\n# TYPE anvil_engine_generation_tokens_total counter\n"
           "anvil_engine_generation_tokens_total{model=\"" + model + "\"} 500\n"
           "# HELP anvil_engine_draft_proposed_tokens_total Draft tokens proposed and verified.\n"
           "# TYPE anvil_engine_draft_proposed_tokens_total counter\n"
           "anvil_engine_draft_proposed_tokens_total" + l + " " + std::to_string(proposed) + "\n"
           "anvil_engine_draft_accepted_tokens_total" + l + " " + std::to_string(accepted) + "\n"
           "anvil_engine_draft_verifications_total" + l + " " + std::to_string(verifications) + "\n"
           "anvil_engine_draft_seconds_total" + l + " 0.25\n"
           "anvil_engine_draft_acceptance_ratio" + l + " 0.5\n"
           "anvil_engine_draft_mean_accepted_tokens" + l + " 1.5\n";
}

double value_of(const std::vector<Measurement>& ms, const std::string& metric) {
    for (const auto& m : ms)
        if (m.metric == metric) return m.value;
    FAIL("no measurement " << metric);
    return 0;
}

std::vector<std::string> names(const std::vector<Measurement>& ms) {
    std::vector<std::string> out;
    for (const auto& m : ms) out.push_back(m.metric);
    return out;
}

// The engine's own counters, read the way qualification reads them.
DraftCounters counters_of(const QualifyingEngine& engine) {
    httplib::Client c("127.0.0.1", engine.port());
    const auto r = c.Get("/metrics");
    REQUIRE(r);
    REQUIRE(r->status == 200);
    const auto counters = parse_draft_counters(r->body);
    REQUIRE(counters);
    return *counters;
}

const std::vector<std::string> kDraftMetrics{"draft_proposed_tokens", "draft_accepted_tokens", "draft_acceptance_ratio",
                                             "draft_mean_accepted_tokens"};

}  // namespace

TEST_CASE("the draft counters are read from a Prometheus exposition, summed over label sets", "[qualify][draft]") {
    const auto c = parse_draft_counters(exposition(120, 90, 40));
    REQUIRE(c);
    CHECK(c->proposed == 120);
    CHECK(c->accepted == 90);
    CHECK(c->verifications == 40);
    // Two label sets of one counter add up; a quoted '}' or '"' in a label value is not its end.
    const auto two = parse_draft_counters(exposition(10, 5, 4, "a} b") + exposition(1, 1, 1, "c\\\"d"));
    REQUIRE(two);
    CHECK(two->proposed == 11);
    CHECK(two->accepted == 6);
    CHECK(two->verifications == 5);
    // An engine without a draft, or with only some of the series: no counters, never zeros.
    CHECK_FALSE(parse_draft_counters("anvil_engine_generation_tokens_total{model=\"m\"} 5\n"));
    CHECK_FALSE(parse_draft_counters("vllm:spec_decode_num_draft_tokens_total{model_name=\"m\"} 7\n"));
    CHECK_FALSE(parse_draft_counters("anvil_engine_draft_proposed_tokens_total 3\nanvil_engine_draft_accepted_tokens_total 2\n"));
    CHECK_FALSE(parse_draft_counters(""));
    // A value that is not a number is no sample.
    CHECK_FALSE(parse_draft_counters("anvil_engine_draft_proposed_tokens_total x\nanvil_engine_draft_accepted_tokens_total 2\n"
                                     "anvil_engine_draft_verifications_total 1\n"));
}

TEST_CASE("acceptance is the difference between the scrapes around the measurements", "[qualify][draft]") {
    SECTION("both scrapes: only the traffic between them counts") {
        const auto a = draft_acceptance(DraftCounters{100, 60, 40}, DraftCounters{300, 210, 90});
        CHECK(names(a.measurements) == kDraftMetrics);
        CHECK(value_of(a.measurements, "draft_proposed_tokens") == 200);
        CHECK(value_of(a.measurements, "draft_accepted_tokens") == 150);
        CHECK(value_of(a.measurements, "draft_acceptance_ratio") == Approx(0.75));
        CHECK(value_of(a.measurements, "draft_mean_accepted_tokens") == Approx(3.0));
        for (const auto& m : a.measurements) CHECK(m.unit == (m.metric == "draft_acceptance_ratio" ? "ratio" : "tokens"));
        CHECK(a.note.empty());
    }
    SECTION("only the scrape after: counted from the engine's start, and the journal says so") {
        const auto a = draft_acceptance(std::nullopt, DraftCounters{300, 210, 90});
        CHECK(value_of(a.measurements, "draft_proposed_tokens") == 300);
        CHECK(value_of(a.measurements, "draft_acceptance_ratio") == Approx(0.7));
        CHECK(a.note == "counted from the engine's start: the draft counters could not be read before the measurements, so the gates' "
                        "requests are included");
    }
    SECTION("no draft series at all: nothing, and nothing to say") {
        const auto a = draft_acceptance(std::nullopt, std::nullopt);
        CHECK(a.measurements.empty());
        CHECK(a.note.empty());
    }
    SECTION("no scrape after, or counters that went backwards: no figures, with the reason") {
        const auto lost = draft_acceptance(DraftCounters{1, 1, 1}, std::nullopt);
        CHECK(lost.measurements.empty());
        CHECK(lost.note == "no acceptance figures: the engine's draft counters could not be read after the measurements");
        const auto restarted = draft_acceptance(DraftCounters{100, 60, 40}, DraftCounters{30, 20, 10});
        CHECK(restarted.measurements.empty());
        CHECK(restarted.note == "no acceptance figures: the draft counters went backwards during the measurements (the engine restarted?)");
    }
    SECTION("nothing proposed in between: the counts are zero, the ratios are not made up") {
        const auto a = draft_acceptance(DraftCounters{5, 3, 2}, DraftCounters{5, 3, 2});
        CHECK(names(a.measurements) == std::vector<std::string>{"draft_proposed_tokens", "draft_accepted_tokens"});
        CHECK(value_of(a.measurements, "draft_proposed_tokens") == 0);
        CHECK(a.note == "the draft proposed 0 tokens in 0 verifications during the measurements, so no acceptance ratio and no mean "
                        "accepted tokens");
    }
}

TEST_CASE("the promotion policy reads none of the draft's figures", "[qualify][draft][promotion]") {
    Contender control;
    control.revision_id = 1;
    control.recipe_id = "f32";
    control.hard_gates_passed = true;
    control.metrics = {{"warm_e2e_seconds", 10.0}, {"tasks_per_hour", 1440.0}};
    for (const double e2e : {7.0, 9.5}) {
        Contender plain = control;
        plain.revision_id = 2;
        plain.recipe_id = "spec";
        plain.metrics = {{"warm_e2e_seconds", e2e}, {"tasks_per_hour", 1440.0 * 10.0 / e2e}, {"relative_quality_loss", 0.0}};
        Contender speculative = plain;
        speculative.metrics.insert({{"draft_proposed_tokens", 400.0}, {"draft_accepted_tokens", 0.0},
                                    {"draft_acceptance_ratio", 0.0}, {"draft_mean_accepted_tokens", 0.0}});
        const Decision a = decide(plain, control, Thresholds{}, PolicyState{});
        const Decision b = decide(speculative, control, Thresholds{}, PolicyState{});
        INFO(a.reason);
        CHECK(a.action == b.action);
        CHECK(a.reason == b.reason);
        CHECK(a.checks == b.checks);
    }
}

TEST_CASE("a speculative anvil-engine is qualified with its draft's acceptance, counted over the measurements only", "[qualify][draft][engine]") {
    TempDir receipts;
    // Early exit after the first layer: it proposes at every decoding step, whatever the text.
    QualifyingEngine engine("f32", "anvil-tiny-llama", {"--draft-layers", "1", "--draft-tokens", "4"});
    // Traffic before the run: not the run's.
    {
        httplib::Client c("127.0.0.1", engine.port());
        const json body = {{"model", "anvil-tiny-llama"}, {"prompt", "one two three one two three one two three one two"},
                           {"max_tokens", 16}, {"temperature", 0}};
        const auto r = c.Post("/v1/completions", body.dump(), "application/json");
        REQUIRE(r);
        REQUIRE(r->status == 200);
    }
    const DraftCounters start = counters_of(engine);
    REQUIRE(start.proposed > 0);
    const Report report = qualify(engine.target("anvil-tiny-llama-layers-cpu", 1), quick_plan(), receipts.path());
    const DraftCounters end = counters_of(engine);
    INFO(report.receipt_path.string());
    CHECK(report.hard_gates_passed());
    for (const auto& metric : kDraftMetrics) {
        INFO(metric);
        CHECK(report.find(metric));
    }
    const double proposed = value_of(report.measurements, "draft_proposed_tokens");
    const double accepted = value_of(report.measurements, "draft_accepted_tokens");
    CHECK(proposed > 0);
    CHECK(accepted <= proposed);
    CHECK(value_of(report.measurements, "draft_acceptance_ratio") == Approx(accepted / proposed));
    const double mean = value_of(report.measurements, "draft_mean_accepted_tokens");
    CHECK(mean >= 0);
    CHECK(mean <= 4);
    // The run's figures exclude what came before it and the gates' requests within it.
    CHECK(proposed <= end.proposed - start.proposed);
    CHECK(proposed < end.proposed);
    // The receipt carries them as local measurements, like every other figure.
    const json receipt = json::parse(anvil::test::read_file(report.receipt_path));
    int found = 0;
    for (const auto& m : receipt["measurements"])
        if (m["metric"].get<std::string>().starts_with("draft_")) {
            ++found;
            CHECK(m["class"] == "local");
            CHECK(m["status"] == "measured");
        }
    CHECK(found == 4);
}

TEST_CASE("an engine without a draft gets no acceptance figures, not zeros", "[qualify][draft][engine]") {
    TempDir receipts;
    QualifyingEngine engine("f32");
    const Report report = qualify(engine.target("anvil-tiny-llama-f32-cpu", 1), quick_plan(), receipts.path());
    CHECK(report.hard_gates_passed());
    CHECK(report.find("warm_e2e_seconds"));
    for (const auto& metric : kDraftMetrics) {
        INFO(metric);
        CHECK_FALSE(report.find(metric));
    }
    const json receipt = json::parse(anvil::test::read_file(report.receipt_path));
    for (const auto& note : receipt["notes"]) CHECK(note.value("label", "") != "draft");
    // On the CPU the engine holds no GPU memory: no gpu_memory_bytes, not a zero.
    CHECK_FALSE(report.find("gpu_memory_bytes"));
}

TEST_CASE("the GPU memory anvil-engine's runners hold is a gauge of its /metrics, left out on the CPU", "[qualify][engine]") {
    anvil::engine::Metrics metrics;
    CHECK(sum_series(metrics.prometheus_text("m")).count("anvil_engine_gpu_memory_bytes") == 0);
    // 80 GB and a little: a count of bytes beyond 2^32 survives the text exactly.
    metrics.gpu_memory_bytes = 80000000123ull;
    const auto series = sum_series(metrics.prometheus_text("m"));
    REQUIRE(series.count("anvil_engine_gpu_memory_bytes") == 1);
    CHECK(series.at("anvil_engine_gpu_memory_bytes") == 80000000123.0);
    CHECK(series.at("anvil_engine_kv_blocks_total") == 0);
}
