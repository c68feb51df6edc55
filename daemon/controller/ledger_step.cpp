// The pass while the ledger cannot be written (a full disk, a read-only or failing device). In: the
// data directory's free space and the store's count of writes that failed for a lasting cause.
// Out: the LedgerWritable condition; passes that write only after a delay that doubles up to 60 s
// (at once when space comes back), one log line per change of state, and the engines' health
// measured by asking them, since the ledger cannot record it. The endpoint keeps serving the
// default it has; nothing is started or promoted until the ledger takes writes again.
#include <spdlog/spdlog.h>

#include "daemon/controller/reconciler.hpp"

namespace anvil::daemon {

namespace {

void log_fault_change(const std::optional<LedgerFault>& before, const LedgerFault& now) {
    if (before && before->reason == now.reason) return;
    spdlog::error("{}; anvild keeps serving the current default, records nothing and tries again, waiting up to {} s between tries",
                  now.message, std::chrono::duration_cast<std::chrono::seconds>(ledger_retry_delay(1000)).count());
}

}  // namespace

bool Reconciler::ledger_may_be_written() {
    const auto now = clock_->steady();
    const auto available = available_bytes(config_.data_dir);
    const auto low = available ? low_space_fault(*available, config_.data_dir) : std::nullopt;
    const bool was_low = memory_.ledger_low_space;
    memory_.ledger_low_space = low.has_value();
    if (low) {
        log_fault_change(memory_.ledger_fault, *low);
        memory_.ledger_fault = low;
        set_condition("LedgerWritable", false, low->reason, low->message);
        measure_engines_without_ledger();
        return false;
    }
    if (!memory_.ledger_fault) return true;
    // Space came back, or the wait is over: a pass that writes tries.
    if (was_low || now >= memory_.ledger_retry_at) return true;
    measure_engines_without_ledger();
    return false;
}

void Reconciler::ledger_outcome(std::uint64_t failures_before) {
    const auto failures = store_.write_failures();
    if (failures.count != failures_before) {
        ++memory_.ledger_failures;
        memory_.ledger_retry_at = clock_->steady() + ledger_retry_delay(memory_.ledger_failures);
        const LedgerFault fault = ledger_fault(failures.sqlite_code, failures.message);
        log_fault_change(memory_.ledger_fault, fault);
        memory_.ledger_fault = fault;
        set_condition("LedgerWritable", false, fault.reason, fault.message);
        memory_.engines_measured_at = {};
        measure_engines_without_ledger();
        return;
    }
    if (memory_.ledger_fault) {
        // A pass that happened to write nothing proves nothing: the ledger must take a write.
        try {
            store_.append_event("ledger", store_.path().string(), "the ledger takes writes again after " + std::to_string(memory_.ledger_failures) +
                                                                      " failed tries (" + memory_.ledger_fault->reason + ")");
        } catch (const state::StoreError& e) {
            if (!state::lasting_write_failure(e.sqlite_code)) throw;
            ledger_outcome(failures_before);  // counted: the fault stands, and the wait grows
            return;
        }
        spdlog::info("the ledger at {} takes writes again after {} failed tries; reconciling as usual", store_.path().string(), memory_.ledger_failures);
        memory_.ledger_fault.reset();
        memory_.ledger_failures = 0;
        std::lock_guard lock(mutex_);
        measured_health_.clear();
    }
    set_condition("LedgerWritable", true, "Writable", "the ledger at " + store_.path().string() + " takes writes");
}

void Reconciler::measure_engines_without_ledger() {
    const auto now = clock_->steady();
    if (now - memory_.engines_measured_at < std::chrono::seconds(1)) return;  // however often the loop is woken
    memory_.engines_measured_at = now;
    std::map<state::Id, std::string> health;
    std::optional<std::string> serving_problem;
    for (const auto& e : engines_->engines()) {
        const bool answers = engines_->answers(e);
        health[e.row_id] = answers ? "healthy" : "not answering";
        if (e.role == drivers::EngineRole::serving && !answers)
            serving_problem = "engine " + e.handle.engine_id + " of " + e.handle.recipe.recipe_id +
                              " does not answer, and no engine can be started while the ledger cannot be written";
    }
    {
        std::lock_guard lock(mutex_);
        measured_health_ = std::move(health);
    }
    if (serving_problem) set_condition("DefaultServing", false, "EngineNotAnswering", *serving_problem);
}

std::optional<std::string> Reconciler::measured_health(state::Id engine_row_id) const {
    std::lock_guard lock(mutex_);
    if (auto it = measured_health_.find(engine_row_id); it != measured_health_.end()) return it->second;
    return std::nullopt;
}

}  // namespace anvil::daemon
