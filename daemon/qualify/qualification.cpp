// qualify(): the order of one run (gates, then measurements, quality and the draft's acceptance when
// the engine answered at all, then peak memory), and the receipt that records it.
#include "daemon/qualify/qualification.hpp"
#include "daemon/qualify/metrics_catalogue.hpp"

#include <map>
#include <stdexcept>
#include <string_view>

#include <spdlog/spdlog.h>

#include "daemon/qualify/draft_acceptance.hpp"
#include "daemon/qualify/gates.hpp"
#include "daemon/qualify/measurements.hpp"
#include "daemon/qualify/metrics_exposition.hpp"
#include "daemon/qualify/quality.hpp"
#include "daemon/qualify/receipt.hpp"
#include "support/clock.hpp"
#include "support/digest.hpp"
#include "state/gate_table.hpp"

namespace anvil::qualify {

using nlohmann::json;

bool Report::hard_gates_passed() const {
    std::map<std::string, bool> passed_by_gate;
    for (const auto& g : gates) passed_by_gate[g.gate] = g.pass;
    return state::hard_gates_passed(passed_by_gate);
}

const GateOutcome* Report::find_gate(std::string_view gate) const {
    for (const auto& g : gates)
        if (g.gate == gate) return &g;
    return nullptr;
}

const Measurement* Report::find(const std::string& metric) const {
    for (const auto& m : measurements)
        if (m.metric == metric) return &m;
    return nullptr;
}

namespace detail {

namespace {

const char* const kFiller[] = {
    "The river ran slowly past the mill, carrying leaves from the hills.",
    "In the market, traders called out the prices of apples and bread.",
    "A small boat drifted near the harbour wall while gulls circled above.",
    "The library kept its oldest maps in a cool room under the stairs.",
    "Every morning the baker lit the oven before the street was awake.",
    "Clouds gathered over the valley, but the rain held off until noon.",
    "The children counted the steps up to the church tower, one by one.",
    "An old clock in the hall chimed the hours a little late.",
    "Farmers brought their sheep down from the high fields in autumn.",
    "The train to the coast stopped at every village along the line.",
    "Lanterns were hung along the bridge for the summer festival.",
    "A letter arrived with a stamp from a country nobody had visited.",
};

json to_json(const Target& t) {
    return {{"host", t.host},           {"port", t.port},       {"model", t.model},
            {"recipe_id", t.recipe_id}, {"revision_id", t.revision_id}, {"revision_sha256", t.revision_sha256},
            {"commit_id", t.commit_id}, {"engine_id", t.engine_id},     {"driver", t.driver},
            {"pid", t.pid ? json(*t.pid) : json()}};
}

json to_json(const Plan& p) {
    return {{"attempts", p.attempts},
            {"min_pass_rate", p.min_pass_rate},
            {"tools", p.tools},
            {"needle_context", p.needle_context ? json(*p.needle_context) : json()},
            {"needle_depths", p.needle_depths},
            {"concurrency", p.concurrency},
            {"max_tokens", p.max_tokens},
            {"request_timeout_ms", p.request_timeout.count()},
            {"quality_positions", p.quality_positions},
            {"top_logprobs", p.top_logprobs},
            {"constrained_json", p.constrained_json},
            {"task_max_tokens", p.task_max_tokens},
            {"warm_e2e_passes", p.warm_e2e_passes},
            {"warm_e2e_min_seconds", p.warm_e2e_min_seconds},
            {"decode_tokens", p.decode_tokens},
            {"prefill_tokens", p.prefill_tokens}};
}

json to_json(const GateOutcome& g) {
    return {{"gate", g.gate}, {"passed", g.passed}, {"attempts", g.attempts}, {"pass", g.pass}, {"reasons", g.reasons}};
}

json to_json(const QualityComparison& q) {
    return {{"mean_kl", q.mean_kl},
            {"top1_agreement", q.top1_agreement},
            {"quality_score", q.quality_score},
            {"relative_quality_loss", q.relative_quality_loss},
            {"positions", q.positions},
            {"control_positions", q.control_positions}};
}

}  // namespace

std::string filler(std::size_t sentences, std::size_t offset) {
    std::string out;
    for (std::size_t i = 0; i < sentences; ++i) out += std::string(i ? " " : "") + kFiller[(offset + i) % std::size(kFiller)];
    return out;
}

}  // namespace detail

Report qualify(const Target& target, const Plan& plan, const std::filesystem::path& receipts_dir,
               const std::optional<json>& control_samples) {
    using namespace detail;
    Report report;
    report.started_at = support::utc_now();
    Journal journal;
    RunContext run(target, plan, journal);
    spdlog::info("qualify: {} revision {} at {}:{} (model {})", target.recipe_id, target.revision_id, target.host,
                 target.port, target.model);

    const state::GateClaims claims{.tools = plan.tools, .context = plan.needle_context.has_value()};
    for (const auto& spec : state::gate_table()) {
        if (!state::runs_for(spec, claims)) continue;
        const GateFunction gate = gate_function(spec.name);
        if (!gate) throw std::logic_error("the gate table names '" + std::string(spec.name) + "', which daemon/qualify cannot run");
        report.gates.push_back(gate(run));
    }

    // An engine that never completed a smoke request has nothing to measure: minutes of timeouts
    // would only delay the verdict the gates already gave. (smoke runs on every plan.)
    const GateOutcome* smoke = report.find_gate("smoke");
    const bool answered = smoke && smoke->passed > 0;
    if (answered) {
        // Draft counters around the speed and quality measurements: their difference is this run's.
        const auto metrics_before = scrape_metrics(run, "draft_counters");
        const auto draft_before = metrics_before ? parse_draft_counters(*metrics_before) : std::nullopt;
        report.measurements = measure_speed(run);
        report.quality_samples = control_samples ? replay_quality_samples(run, *control_samples) : draw_quality_samples(run);
        if (control_samples) {
            const QualityComparison q = compare_quality(*control_samples, report.quality_samples);
            report.quality = q;
            // A partial comparison is kept in the report and the receipt, but yields no evidence:
            // the promotion policy must see the quality as not measured and hold.
            if (q.complete()) {
                report.measurements.push_back({metric::relative_quality_loss, q.relative_quality_loss});
                report.measurements.push_back({metric::mean_kl, q.mean_kl});
                report.measurements.push_back({metric::top1_agreement, q.top1_agreement});
            } else {
                journal.note("quality", "incomplete: " + std::to_string(q.positions) + " of " +
                                            std::to_string(q.control_positions) + " control positions compared");
            }
        }
        const auto metrics_after = scrape_metrics(run, "draft_counters");
        const DraftAcceptance draft =
            draft_acceptance(draft_before, metrics_after ? parse_draft_counters(*metrics_after) : std::nullopt);
        report.measurements.insert(report.measurements.end(), draft.measurements.begin(), draft.measurements.end());
        if (!draft.note.empty()) journal.note("draft", draft.note);
        // What anvil-engine's runners hold on the GPU (weights, working memory, KV cache), by its
        // own account: the device's share of this engine's memory, which the process's RSS omits.
        if (metrics_after) {
            const auto series = sum_series(*metrics_after);
            if (const auto it = series.find("anvil_engine_gpu_memory_bytes"); it != series.end() && it->second > 0)
                report.measurements.push_back({metric::gpu_memory, it->second});
        }
    } else {
        journal.note("measurements", "skipped: no smoke request succeeded");
    }
    if (target.pid) {
        if (auto peak = process_tree_peak_bytes(*target.pid))
            report.measurements.push_back({metric::peak_memory, double(*peak)});
        else journal.note("peak_memory", "not measured: /proc/" + std::to_string(*target.pid) + "/status is not readable");
    }
    report.finished_at = support::utc_now();
    if (plan.cancelled && plan.cancelled->load())
        throw Cancelled("qualification of " + target.recipe_id + " revision " + std::to_string(target.revision_id) + " cut short");

    json measurements = json::array();
    for (const auto& m : report.measurements)
        measurements.push_back({{"metric", m.metric}, {"value", m.value}, {"unit", m.unit}, {"class", "local"}, {"status", "measured"}});
    json gates = json::array();
    for (const auto& g : report.gates) gates.push_back(to_json(g));
    const json receipt = {
        {"schema", "anvil.qualification-receipt/v1"},
        {"target", to_json(target)},
        {"plan", to_json(plan)},
        {"started_at", report.started_at},
        {"finished_at", report.finished_at},
        {"hard_gates_passed", report.hard_gates_passed()},
        {"gates", gates},
        {"measurements", measurements},
        {"quality", report.quality ? to_json(*report.quality) : json()},
        {"quality_samples", report.quality_samples},
        {"control_samples_sha256", control_samples ? json(support::sha256_hex(control_samples->dump())) : json()},
        {"notes", journal.notes()},
        {"exchanges", journal.exchanges()},
    };
    const WrittenReceipt written = write_receipt(receipts_dir, target.recipe_id, target.revision_id, receipt);
    report.receipt_path = written.path;
    report.receipt_sha256 = written.sha256;
    spdlog::info("qualify: {} revision {}: hard gates {}, {} measurements, receipt {}", target.recipe_id,
                 target.revision_id, report.hard_gates_passed() ? "passed" : "failed", report.measurements.size(),
                 written.path.string());
    return report;
}

}  // namespace anvil::qualify
