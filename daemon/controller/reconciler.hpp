// The reconcile loop's one pass: level-triggered and idempotent. Each pass observes (registry
// commits, engines' health), reads the ledger, takes the one next step per concern, records it and
// acts: ingest and judge new revisions, keep the default's engine running behind the stable
// endpoint, qualify the next candidate, promote by policy, and roll back a default that cannot
// serve. A pass never assumes the previous one finished: everything it needs is read again.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/anvild/config.hpp"
#include "daemon/anvild/daemon_metrics.hpp"
#include "engine/supervisor/engine_supervisor.hpp"
#include "daemon/anvild/qualification_runner.hpp"
#include "daemon/anvild/registry_watch.hpp"
#include "daemon/endpoint/stable_endpoint.hpp"
#include "daemon/qualify/promotion_policy.hpp"
#include "registry/recipe_gates.hpp"
#include "state/store.hpp"

namespace anvil::daemon {

// A request the caller got wrong (unknown recipe, wrong status): the API answers it as 4xx.
struct RequestRefused : std::runtime_error {
    int status;
    std::string code;
    RequestRefused(int s, std::string c, const std::string& message) : std::runtime_error(message), status(s), code(std::move(c)) {}
};

struct Condition {
    bool ok = true;
    std::string reason;
    std::string message;
    std::string since;
};

class Reconciler {
public:
    Reconciler(const DaemonConfig& config, state::Store& store, endpoint::StableEndpoint& endpoint, DaemonMetrics& metrics);
    ~Reconciler();

    // Finds the engines an earlier anvild left running; call once before the first pass.
    void start_up();
    void pass();
    // On SIGTERM: waits for a running qualification's engine to stop; stops serving engines if asked.
    void shut_down(bool stop_engines);
    // Called (from any thread) when something wants a pass soon: a qualification ended, an API write.
    void set_wake(std::function<void()> wake) { wake_ = std::move(wake); }

    // ---- for the API (any thread) ----
    bool ready() const;
    std::vector<std::string> not_ready_reasons() const;
    nlohmann::json status() const;
    // The inventory feasibility judges with ({"source", "inventory"}; inventory null without one).
    nlohmann::json inventory_json() const;
    nlohmann::json registry_status() const;
    nlohmann::json last_pass() const;  // when it finished, how long, and each step's milliseconds
    std::optional<nlohmann::json> feasibility_of(const std::string& recipe_id) const;
    std::vector<driver::RunningEngine> engines() const { return engines_.engines(); }
    void request_sync();
    void request_qualification(const std::string& recipe_id, const std::string& actor);
    void pin(const std::optional<std::string>& recipe_id, const std::string& actor);
    void freeze(const std::string& reason, const std::string& actor);
    void unfreeze(const std::string& actor);

private:
    struct Backoff {
        int failures = 0;
        std::chrono::steady_clock::time_point next{};
    };

    void registry_step();
    void ingest(RegistryWatch& watch, const WatchResult& result, state::Id source_id);
    // Retires what must no longer be considered: revisions superseded by a newer one of their recipe,
    // and newest revisions whose document is not at the synced commit of its source (removed, or
    // replaced by a force-push). Level-triggered: finds them whatever pass or crash left them.
    void retire_step();
    // Why this revision's document is not at the synced commit of its source, or nothing when it
    // is. Every decision to qualify, validate, pin or promote asks first. Takes mutex_.
    std::optional<std::string> not_in_registry(const std::string& source_url, const std::string& recipe_id, const std::string& sha256) const;
    std::optional<std::string> not_in_registry(const state::RevisionRow& revision) const {
        return not_in_registry(revision.source_url, revision.recipe_id, revision.sha256);
    }
    // Feasibility of new revisions: a verdict each, and `rejected` for what cannot or must not run.
    void judge(const std::vector<std::pair<state::Id, const registry::Document*>>& revisions);
    // Records `moves` in one transaction, or, when the guard refuses one, each on its own.
    void record_transitions(const std::vector<state::TransitionRequest>& moves);
    void judge_stragglers();
    void engine_step();
    void qualification_step();
    void promotion_step();
    void serving_step();

    struct GateInputs {
        registry::LicenceBook licences;
        std::map<std::string, double> vram_gb;  // hardware id → nominal GB per GPU
        // The embedded engine's host_memory gate: this host's memory (MemTotal, read with the
        // inputs), and each model directory's shape (its config.json), read once per directory found.
        std::optional<registry::EvidenceVariable> host_memory;
        std::shared_ptr<std::map<std::string, registry::ModelShapeReading>> model_shapes =
            std::make_shared<std::map<std::string, registry::ModelShapeReading>>();
    };
    const GateInputs& gate_inputs() const;  // callers hold mutex_
    registry::GateContext gate_context(const registry::Recipe& recipe) const;
    qualify::Contender contender(const state::RevisionRow& revision) const;
    qualify::Thresholds thresholds() const;
    void promote(const state::RevisionRow& revision, const std::string& reason, const std::string& actor);
    void rollback(const std::string& why);
    void set_condition(const std::string& type, bool ok, const std::string& reason, const std::string& message);
    void note(const std::string& key, const std::string& subject, const std::string& message);
    void wake() const {
        if (wake_) wake_();
    }

    const DaemonConfig& config_;
    state::Store& store_;
    endpoint::StableEndpoint& endpoint_;
    DaemonMetrics& metrics_;
    driver::EngineSupervisor engines_;
    QualificationRunner runner_;
    std::function<void()> wake_;

    mutable std::mutex mutex_;  // guards everything below, which API threads read
    std::vector<std::unique_ptr<RegistryWatch>> watches_;
    std::map<std::string, state::Id> source_ids_;
    std::optional<registry::Inventory> inventory_;
    std::string inventory_note_;
    std::map<std::string, Condition> conditions_;
    nlohmann::json last_pass_ = nullptr;
    bool force_sync_ = false;
    nlohmann::json step_detail_;  // finer timings of the running pass (reconcile thread only)
    bool first_pass_done_ = false;
    bool exclusive_qualification_ = false;  // the default's engine is paused for a qualification
    std::optional<std::pair<std::string, std::string>> resume_after_exclusive_;  // (default, candidate): reconcile thread only
    std::map<state::Id, Backoff> serving_backoff_;
    std::map<state::Id, Backoff> retry_backoff_;
    std::map<std::string, std::string> last_notes_;
    std::map<state::Id, int> fidelity_ranks_;
    std::string retire_checked_key_;  // catalogs and ledger as the retire step last saw them (reconcile thread only)
    mutable std::optional<GateInputs> gate_inputs_;
    mutable std::string gate_inputs_key_;  // revision → fidelity_rank, computed once  // de-duplicates repeated hold reasons
};

// Orders candidates for qualification: the most faithful weights first (f32 before bf16/f16
// before 8-bit before fewer bits), so the first default is the natural control for the rest; a
// recipe with a draft right after the plain ones of its weights.
int fidelity_rank(const registry::Recipe& recipe);

}  // namespace anvil::daemon
