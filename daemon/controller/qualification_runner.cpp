#include "daemon/controller/qualification_runner.hpp"
#include "daemon/qualify/metrics_catalogue.hpp"

#include <fstream>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "daemon/drivers/driver.hpp"
#include "daemon/drivers/readiness.hpp"
#include "support/atomic_file.hpp"

namespace anvil::daemon {

qualify::Plan plan_for(const registry::Recipe& recipe, const DaemonConfig& config) {
    qualify::Plan plan;
    plan.attempts = config.promotion.attempts;
    plan.min_pass_rate = promotion_thresholds(config).min_deterministic_pass_rate;
    plan.tools = recipe.capabilities.tools.value_or(false);
    plan.constrained_json = recipe.capabilities.structured_output.value_or(false);
    plan.needle_depths = config.promotion.needle_depths;
    plan.warm_e2e_min_seconds = std::chrono::duration<double>(config.promotion.warm_e2e_min).count();
    if (config.requirements) {
        if (config.requirements->concurrency.value)
            plan.concurrency = std::max(1, static_cast<int>(registry::to_double(*config.requirements->concurrency.value)));
        // The needle gate runs where the recipe claims retrieval over its context, up to the
        // requirement's context (or the recipe's own limit, if that is smaller).
        std::int64_t t_req = 0;
        for (const auto& [name, v] : config.requirements->tokens)
            if (v.value) t_req += static_cast<std::int64_t>(registry::to_double(*v.value));
        if (recipe.capabilities.retrieval.value_or(false) && t_req > 0)
            plan.needle_context = std::min(t_req, recipe.serving.max_context_tokens.value_or(t_req));
    }
    return plan;
}

QualificationRunner::QualificationRunner(const DaemonConfig& config, state::Store& store, drivers::EngineSupervisor& engines, RegistryCheck in_registry)
    : config_(config), store_(store), engines_(engines), in_registry_(std::move(in_registry)) {}

QualificationRunner::~QualificationRunner() {
    cancel();
    wait();
}

std::optional<state::Id> QualificationRunner::current() const {
    std::lock_guard lock(mutex_);
    return current_;
}

std::filesystem::path QualificationRunner::samples_path(state::Id revision_id) const {
    return config_.data_dir / "quality" / (std::to_string(revision_id) + ".json");
}

void QualificationRunner::withdraw(state::Id revision_id, const std::string& why) {
    std::lock_guard lock(mutex_);
    if (current_ != revision_id || withdrawn_) return;
    spdlog::info("withdrawing the qualification of revision {}: {}", revision_id, why);
    withdrawn_ = why;
    cancel_ = true;
}

void QualificationRunner::wait() {
    if (worker_.joinable()) worker_.join();
}

bool QualificationRunner::run(QualificationJob job, std::function<void()> done) {
    if (busy_ || stopping_) return false;
    wait();
    busy_ = true;
    {
        std::lock_guard lock(mutex_);
        current_ = job.revision_id;
    }
    worker_ = std::thread([this, job = std::move(job), done = std::move(done)] {
        try {
            execute(job);
        } catch (const std::exception& e) {
            spdlog::error("qualification of {} revision {}: {}", job.recipe.id, job.revision_id, e.what());
        }
        {
            std::lock_guard lock(mutex_);
            current_.reset();
            // A withdrawn job ends here; the next one runs unless anvild is stopping.
            if (withdrawn_ && !stopping_) cancel_ = false;
            withdrawn_.reset();
        }
        busy_ = false;
        if (done) done();
    });
    return true;
}

void QualificationRunner::execute(const QualificationJob& job) {
    spdlog::info("qualifying {} revision {}{}", job.recipe.id, job.revision_id,
                 job.control_revision ? " against the default, revision " + std::to_string(*job.control_revision) : std::string());
    // A qualification's evidence, verdicts, closing transition and its event in the feed are one
    // transaction (record_qualification).
    state::QualificationRecord record;
    record.revision_id = job.revision_id;
    auto fail = [&](const std::string& reason) {
        record.to = state::Status::failed;
        record.reason = reason;
        record.event = state::EventInput{"qualification", job.recipe.id, "revision " + std::to_string(job.revision_id) + " failed: " + reason};
        store_.record_qualification(record);
    };

    auto cut_short = [&](const std::string& what) {
        std::optional<std::string> withdrawn;
        {
            std::lock_guard lock(mutex_);
            withdrawn = withdrawn_;
        }
        if (withdrawn) {
            spdlog::info("{}: withdrawn ({}), its engine stopped", what, *withdrawn);
            store_.append_event("qualification", job.recipe.id,
                                "revision " + std::to_string(job.revision_id) + " withdrawn, its engine stopped: " + *withdrawn);
            return;
        }
        spdlog::info("{}: left qualifying, to start again", what);
        store_.append_event("qualification", job.recipe.id,
                            "revision " + std::to_string(job.revision_id) + " cut short by anvild stopping; it is qualified again from the start");
    };
    drivers::RunningEngine engine;
    try {
        engine = engines_.start(job.revision_id, job.recipe, drivers::EngineRole::qualification, &cancel_);
    } catch (const drivers::StartCancelled& e) {
        cut_short(e.what());
        return;
    } catch (const std::exception& e) {
        record.verdicts.push_back({"startup", state::GateResult::fail, std::nullopt, {e.what()}, {}});
        fail(std::string("the engine did not start: ") + e.what());
        return;
    }

    std::optional<nlohmann::json> control_samples;
    if (job.control_revision) {
        std::ifstream in(samples_path(*job.control_revision));
        if (in) control_samples = nlohmann::json::parse(in, nullptr, false);
        if (control_samples && control_samples->is_discarded()) control_samples.reset();
    }

    qualify::Target target;
    target.host = engine.handle.host;
    target.port = engine.handle.port;
    target.model = engine.handle.served_model_name;
    target.recipe_id = job.recipe.id;
    target.revision_id = job.revision_id;
    target.revision_sha256 = job.revision_sha256;
    target.commit_id = job.commit_id;
    target.engine_id = engine.handle.engine_id;
    target.driver = engine.handle.driver;
    if (engine.handle.pid > 0) target.pid = engine.handle.pid;
    target.api_key = engine.handle.api_key;

    qualify::Report report;
    qualify::Plan plan = plan_for(job.recipe, config_);
    plan.cancelled = &cancel_;
    try {
        report = qualify::qualify(target, plan, config_.data_dir / "receipts", control_samples);
    } catch (const qualify::Cancelled& e) {
        engines_.stop(engine);
        cut_short(e.what());
        return;
    } catch (const std::exception& e) {
        engines_.stop(engine);
        fail(std::string("qualification could not record its receipt: ") + e.what());
        return;
    }
    engines_.stop(engine);

    // Evidence: every measurement and every gate's pass rate, local and measured, with the receipt.
    const std::string source = "qualification of revision " + std::to_string(job.revision_id) + " (receipt " +
                               report.receipt_path.filename().string() + ")";
    // The control the quality was compared with, when the suite compared every control position:
    // every row names it (control_revision_id), so a later default cannot inherit the comparison.
    const bool compared = report.find(std::string(qualify::metric::relative_quality_loss.name)) && job.control_revision;
    auto evidence = [&](const std::string& metric, double value, const std::string& unit) {
        state::EvidenceRow row;
        row.metric = metric;
        row.min = row.max = registry::Number(value);
        row.unit = unit;
        row.status = registry::EvidenceStatus::measured;
        row.evidence_class = state::EvidenceClass::local;
        row.source = source;
        row.observed_at = report.finished_at;
        row.receipt_sha256 = report.receipt_sha256;
        row.receipt_path = report.receipt_path.string();
        if (compared) row.control_revision_id = job.control_revision;
        record.evidence.push_back(std::move(row));
        return record.evidence.size() - 1;
    };
    for (const auto& m : report.measurements) evidence(m.metric, m.value, m.unit);
    std::vector<std::string> failed_gates;
    for (const auto& g : report.gates) {
        const std::size_t e = evidence(qualify::gate_pass_rate_metric(g.gate), g.attempts ? double(g.passed) / g.attempts : 0.0, "ratio");
        record.verdicts.push_back({g.gate, g.pass ? state::GateResult::pass : state::GateResult::fail, std::nullopt, g.reasons, {e}});
        if (!g.pass) failed_gates.push_back(g.gate + " (" + std::to_string(g.passed) + "/" + std::to_string(g.attempts) + ")");
    }

    if (!report.hard_gates_passed()) {  // the gate table says which failures fail the revision
        fail(fmt::format("hard gates failed: {}", fmt::join(failed_gates, ", ")));
        return;
    }
    // Only a revision whose document is at the synced commit is validated: one removed or replaced
    // while it was measured is retired instead, its measurements kept as evidence.
    if (auto why = in_registry_ ? in_registry_(job.revision_id) : std::nullopt) {
        record.to = state::Status::retired;
        record.reason = "not validated: " + *why;
        record.event = state::EventInput{"qualification", job.recipe.id, "revision " + std::to_string(job.revision_id) + " passed but was retired: " + *why};
        store_.record_qualification(record);
        return;
    }
    const auto samples = samples_path(job.revision_id);
    std::filesystem::create_directories(samples.parent_path());
    support::write_file_atomically(samples, report.quality_samples.dump(), 0600);
    try {
        record.to = state::Status::validated;
        record.reason = "every hard gate passed on this machine (receipt sha256 " + report.receipt_sha256.substr(0, 12) + ")";
        store_.record_qualification(record);
    } catch (const state::TransitionRefused& e) {
        // Nothing of the refused record landed: the same measurements are recorded with the failure.
        fail(std::string("could not be validated: ") + e.what());
    }
}

}  // namespace anvil::daemon
