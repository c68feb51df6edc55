// Qualification against the real embedded engine, a child process over real HTTP on 127.0.0.1:
// the gates and measurements of a healthy engine, its receipt, quality against itself and
// against other weight formats, and the failures a wrong model id, unkept claims and an engine
// that is not running must produce (failed gates with reasons, never exceptions).
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>

#include <netinet/in.h>
#include <sys/socket.h>

#include <spdlog/spdlog.h>

#include "daemon/qualify/qualification.hpp"
#include "support/digest.hpp"
#include "test_qualify_engine.hpp"
#include "test_support.hpp"

using namespace anvil::qualify;
using anvil::test::TempDir;
using anvil::test::qualify::QualifyingEngine;
using anvil::test::qualify::quick_plan;
using nlohmann::json;

namespace {

const GateOutcome& gate(const Report& r, const std::string& name) {
    for (const auto& g : r.gates)
        if (g.gate == name) return g;
    FAIL("no gate " << name);
    throw std::logic_error("unreachable");
}

std::string all_reasons(const GateOutcome& g) {
    std::string out;
    for (const auto& r : g.reasons) out += r + "\n";
    return out;
}

// A port on 127.0.0.1 that nothing listens on: bound once to learn a free number, then closed.
int closed_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    socklen_t length = sizeof addr;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0);
    ::close(fd);
    return ntohs(addr.sin_port);
}

void check_receipt(const Report& report, const std::filesystem::path& dir) {
    REQUIRE(std::filesystem::exists(report.receipt_path));
    CHECK(report.receipt_path.parent_path() == dir);
    CHECK(anvil::support::sha256_file_hex(report.receipt_path) == report.receipt_sha256);
    // Only the receipt: the temporary file was renamed, not left behind.
    int files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) files += entry.path() == report.receipt_path ? 1 : 100;
    CHECK(files == 1);
}

}  // namespace

TEST_CASE("a healthy embedded engine passes the gates, is measured, and compares with itself and other formats", "[qualify]") {
    TempDir receipts;
    QualifyingEngine f32("f32");
    const Plan plan = quick_plan();
    // The control measures warm e2e for at least 1 s: more than the 3 passes this fast engine needs.
    Plan timed = plan;
    timed.warm_e2e_min_seconds = 1;
    const Report control = qualify(f32.target("anvil-tiny-llama-f32-cpu", 1), timed, receipts.path());
    INFO(control.receipt_path.string());
    for (const char* name : {"identity", "smoke", "json", "determinism"}) {
        const GateOutcome& g = gate(control, name);
        INFO(name << ": " << all_reasons(g));
        CHECK(g.pass);
        CHECK(g.passed == 2);
        CHECK(g.attempts == 2);
    }
    CHECK(control.gates.size() == 4);  // no tools, no needle: the plan does not claim them
    CHECK(control.hard_gates_passed());
    for (const char* metric : {"ttft_seconds", "prefill_tokens_per_second", "decode_tokens_per_second_c1",
                               "decode_tokens_per_second_cN", "warm_e2e_seconds", "tasks_per_hour", "peak_memory_bytes"}) {
        const Measurement* m = control.find(metric);
        INFO(metric);
        REQUIRE(m);
        CHECK(m->value > 0);
    }
    // The f32 weights alone are 12 MB: the engine's peak resident set is at least that.
    CHECK(control.find("peak_memory_bytes")->value > 12e6);
    CHECK(control.find("tasks_per_hour")->value == Approx(4 * 3600 / control.find("warm_e2e_seconds")->value));
    CHECK_FALSE(control.quality);  // no control samples: this one may become the control
    CHECK_FALSE(control.find("relative_quality_loss"));
    const json& positions = control.quality_samples["positions"];
    CHECK(positions.size() >= 6);  // at least the bare prompts; usually 6 × 4
    CHECK(positions.size() <= 6 * 4);
    CHECK(control.quality_samples["errors"].empty());
    CHECK(positions[0]["top_logprobs"].size() >= 2);

    check_receipt(control, receipts.path());
    const json receipt = json::parse(anvil::test::read_file(control.receipt_path));
    CHECK(receipt["schema"] == "anvil.qualification-receipt/v1");
    CHECK(receipt["target"]["recipe_id"] == "anvil-tiny-llama-f32-cpu");
    CHECK(receipt["target"]["pid"] == f32.pid());
    CHECK(receipt["plan"]["attempts"] == 2);
    CHECK(receipt["hard_gates_passed"] == true);
    CHECK(receipt["measurements"].size() == control.measurements.size());
    CHECK(receipt["measurements"][0]["class"] == "local");
    CHECK(receipt["measurements"][0]["status"] == "measured");
    // Every request and response: labelled, timed, with bodies; long prompts shortened to a hash.
    std::set<std::string> labels;
    for (const auto& x : receipt["exchanges"]) {
        labels.insert(x["label"].get<std::string>());
        CHECK(x["status"] == 200);
        CHECK((x.contains("response") || x.contains("events")));
        CHECK(x["seconds"].get<double>() > 0);
    }
    for (const char* label : {"identity", "smoke", "json", "determinism", "ttft", "prefill", "decode_c1", "decode_cN",
                              "warmup", "warm_e2e", "quality"})
        CHECK(labels.count(label) == 1);
    // Warm e2e is the median of at least the plan's passes of the 4 tasks, after one warm-up
    // task, and of as many more as make up the plan's minimum time (this engine is fast).
    const auto count = [&](const char* label) {
        return std::count_if(receipt["exchanges"].begin(), receipt["exchanges"].end(), [&](const json& x) { return x["label"] == label; });
    };
    CHECK(count("warmup") == 1);
    const auto tasks = count("warm_e2e");
    CHECK(tasks % 4 == 0);
    CHECK(tasks >= 4 * plan.warm_e2e_passes);
    CHECK(tasks <= 4 * 25);
    std::vector<double> seconds;
    for (const auto& x : receipt["exchanges"])
        if (x["label"] == "warm_e2e") seconds.push_back(x["seconds"].get<double>());
    const double spent = std::accumulate(seconds.begin(), seconds.end(), 0.0);
    const double last_pass = std::accumulate(seconds.end() - 4, seconds.end(), 0.0);
    // Past the minimum time, or at the cap of 25 passes; and no pass after the one that reached it.
    CHECK((spent >= timed.warm_e2e_min_seconds || tasks == 4 * 25));
    if (tasks > 4 * plan.warm_e2e_passes) CHECK(spent - last_pass < timed.warm_e2e_min_seconds);
    CHECK(receipt["plan"]["warm_e2e_min_seconds"] == 1);
    CHECK(receipt["plan"]["warm_e2e_passes"] == plan.warm_e2e_passes);
    bool median_noted = false;
    for (const auto& n : receipt["notes"])
        median_noted = median_noted || n["text"].get<std::string>().rfind("the median of " + std::to_string(tasks / 4) + " passes (", 0) == 0;
    CHECK(median_noted);

    // The same engine replaying its own prefixes: the same distributions.
    const Report self = qualify(f32.target("anvil-tiny-llama-f32-cpu", 1), plan, receipts.path(), control.quality_samples);
    // Every measurement is a metric of the catalogue, with the catalogue's unit (the quality
    // comparison's too, which only a report with a control has).
    for (const Report* r : {&control, &self})
        for (const Measurement& m : r->measurements) {
            INFO(m.metric);
            const auto catalogued = find_metric(m.metric);
            REQUIRE(catalogued);
            CHECK(m.unit == catalogued->unit);
        }
    REQUIRE(self.quality);
    CHECK(self.quality->complete());
    CHECK(self.quality->positions == positions.size());
    CHECK(self.quality->mean_kl == Approx(0).margin(1e-9));
    CHECK(self.quality->top1_agreement == 1);
    CHECK(self.quality->relative_quality_loss == Approx(0).margin(1e-9));
    REQUIRE(self.find("relative_quality_loss"));
    CHECK(self.receipt_path != control.receipt_path);

    // Other weight formats of the same model: close to the control, not identical.
    for (const char* weights : {"q8", "bf16"}) {
        QualifyingEngine other(weights);
        const Report r = qualify(other.target(std::string("anvil-tiny-llama-") + weights + "-cpu", 2), plan, receipts.path(),
                                 control.quality_samples);
        INFO(weights);
        CHECK(r.hard_gates_passed());
        REQUIRE(r.quality);
        CHECK(r.quality->complete());
        CHECK(r.quality->mean_kl > 0);
        CHECK(r.quality->mean_kl < 0.05);
        CHECK(r.quality->top1_agreement >= 0.75);
        CHECK(r.quality->relative_quality_loss > 0);
        CHECK(r.quality->relative_quality_loss < 0.3);
        REQUIRE(r.find("relative_quality_loss"));
        CHECK(r.find("relative_quality_loss")->value == r.quality->relative_quality_loss);
        spdlog::info("qualify test: {} vs f32: mean_kl {:.5f}, top1 {:.3f}, relative_quality_loss {:.4f}; warm_e2e {:.3f} s against {:.3f} s",
                     weights, r.quality->mean_kl, r.quality->top1_agreement, r.quality->relative_quality_loss,
                     r.find("warm_e2e_seconds")->value, control.find("warm_e2e_seconds")->value);
    }
}

TEST_CASE("a wrong model id fails identity with the ids the engine lists", "[qualify]") {
    TempDir receipts;
    QualifyingEngine engine("q8", "some-other-model");
    Plan plan = quick_plan();
    const Report r = qualify(engine.target("anvil-tiny-llama-q8-cpu", 3), plan, receipts.path());
    const GateOutcome& identity = gate(r, "identity");
    CHECK_FALSE(identity.pass);
    CHECK(identity.passed == 0);
    REQUIRE(identity.reasons.size() == 2);
    CHECK_THAT(identity.reasons[0], Catch::Contains("'some-other-model'") && Catch::Contains("not 'anvil-tiny-llama'"));
    // The engine refuses requests for a model it does not serve, so nothing else passes either.
    CHECK_FALSE(gate(r, "smoke").pass);
    CHECK_THAT(all_reasons(gate(r, "smoke")), Catch::Contains("HTTP 404") && Catch::Contains("does not exist"));
    CHECK_FALSE(r.hard_gates_passed());
    // Nothing answered, so speed was not measured; memory still was (the process is there).
    CHECK_FALSE(r.find("warm_e2e_seconds"));
    CHECK(r.find("peak_memory_bytes"));
    check_receipt(r, receipts.path());
}

TEST_CASE("claims the tiny model cannot keep fail with reasons: tool calls and needle retrieval", "[qualify]") {
    TempDir receipts;
    QualifyingEngine engine("q8");
    Plan plan = quick_plan();
    plan.tools = true;
    plan.needle_context = 512;
    const Report r = qualify(engine.target("anvil-tiny-llama-q8-cpu", 4), plan, receipts.path());
    CHECK(gate(r, "smoke").pass);
    const GateOutcome& tools = gate(r, "tools");
    CHECK_FALSE(tools.pass);
    CHECK_THAT(all_reasons(tools), Catch::Contains("no tool_calls"));
    const GateOutcome& needle = gate(r, "needle");
    INFO(all_reasons(needle));
    CHECK_FALSE(needle.pass);
    REQUIRE(needle.reasons.size() == 2);
    // Measured, not refused: the prompts were served (at 256 and 512 tokens) and the answers lack the key.
    CHECK_THAT(needle.reasons[0], Catch::Contains("6 of 6 missed") && Catch::Contains("lacks 48213"));
    CHECK_THAT(needle.reasons[1], Catch::Contains("lacks 90571"));
    CHECK_FALSE(r.hard_gates_passed());
    const json receipt = json::parse(anvil::test::read_file(r.receipt_path));
    long long longest = 0;
    int shortened = 0;
    for (const auto& x : receipt["exchanges"]) {
        if (x["label"] != "needle") continue;
        longest = std::max(longest, x["response"]["usage"]["prompt_tokens"].get<long long>());
        // Long prompts are in the receipt as their length and sha256, not their text.
        const json& content = x["request"]["messages"][0]["content"];
        if (content.is_object()) {
            CHECK(content["length"].get<int>() > 512);
            CHECK(content["sha256"].get<std::string>().size() == 64);
            ++shortened;
        }
    }
    CHECK(shortened >= 6);  // at least the 2 attempts × 3 depths at 512 tokens (over 512 bytes)
    CHECK(longest > 512 * 0.7);
    CHECK(longest <= 512);
}

TEST_CASE("an engine that is not running fails every gate instead of throwing", "[qualify]") {
    TempDir receipts;
    Target t;
    t.port = closed_port();
    t.model = "anvil-tiny-llama";
    t.recipe_id = "gone/recipe";  // a '/' must not escape the receipts directory
    t.revision_id = 5;
    t.pid = 0x3ffffff;  // beyond pid_max: no /proc entry
    Plan plan = quick_plan();
    plan.tools = true;
    plan.needle_context = 256;
    Report r;
    REQUIRE_NOTHROW(r = qualify(t, plan, receipts.path()));
    CHECK(r.gates.size() == 6);
    for (const auto& g : r.gates) {
        INFO(g.gate);
        CHECK_FALSE(g.pass);
        CHECK(g.passed == 0);
        REQUIRE_FALSE(g.reasons.empty());
        CHECK_THAT(g.reasons[0], Catch::Contains("Connection"));
    }
    CHECK(r.measurements.empty());
    CHECK_FALSE(r.hard_gates_passed());
    check_receipt(r, receipts.path());
    CHECK_THAT(r.receipt_path.filename().string(), Catch::StartsWith("gone_recipe-5-"));

    // The receipt is the one thing that must be written: where it cannot be, qualify throws.
    anvil::test::write_file(receipts / "file", "not a directory");
    plan.tools = false;
    plan.needle_context.reset();
    plan.attempts = 1;
    CHECK_THROWS_WITH(qualify(t, plan, receipts / "file" / "receipts"), Catch::Contains("receipt"));
}
