// The reconcile loop's one pass: level-triggered and idempotent. Each pass observes (registry
// commits, engines' health), reads the ledger, takes the one next step per concern, records it and
// acts. The steps, in the order kSteps (reconciler.cpp) runs them; a step that throws is named in the
// Reconciling condition and the steps that need it wait for the next pass:
//   inventory               (reconciler.cpp) under a Slurm placement, the cluster's nodes read again
//   registry_step.cpp       registry: fetch each due source, swap its catalog in, ingest what changed;
//                           retire: what left the registry or was superseded (the recipes commits touched)
//   judge_step.cpp          feasibility on paper for new revisions: a verdict each, `rejected` for what cannot run
//   engine_step.cpp         notice engines that exited
//   promotion_step.cpp      ask qualify::choose_promotion (pin, freeze, policy, thresholds) and act on its answer
//   serving_step.cpp        keep the default's engine running behind the stable endpoint; roll back one that cannot serve
//   qualification_step.cpp  start the next qualification (retries with backoff, the exclusive window)
//   ledger_step.cpp         around them, while the ledger cannot be written: back off, measure engines' health, recover
// The timing rules (backoff, probation, the window) are qualify/controller_rules.hpp's.
// Operator requests (operator_requests.cpp) record intent in the ledger and wake the pass, which
// acts. A pass never assumes the previous one finished: everything it needs is read again.
//
// Locking: the reconcile thread is the only writer of the state below mutex_; it takes mutex_ only
// to swap in what it prepared (a catalog, a condition, gate inputs), never across a fetch, a drain,
// an engine start or stop, so /readyz, /metrics and /api/v1/status answer while a pass is slow.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/config/config.hpp"
#include "daemon/controller/daemon_metrics.hpp"
#include "daemon/controller/controller_ports.hpp"
#include "daemon/controller/ledger_fault.hpp"
#include "daemon/controller/operator_requests.hpp"
#include "daemon/controller/pass_memory.hpp"
#include "daemon/controller/registry_watch.hpp"
#include "daemon/endpoint/stable_endpoint.hpp"
#include "daemon/drivers/engine_supervisor.hpp"
#include "daemon/qualify/promotion_policy.hpp"
#include "registry/recipe_gates.hpp"
#include "state/store.hpp"

namespace anvil::daemon {

struct Condition {
    bool ok = true;
    std::string reason;
    std::string message;
    std::string since;
};

class Reconciler {
public:
    // Every part of the world it acts on given: production's are wired in daemon/anvild/wiring.hpp,
    // the tests' are fakes.
    Reconciler(const DaemonConfig& config, state::Store& store, ControllerPorts ports, DaemonMetrics& metrics);
    ~Reconciler();

    // Finds the engines an earlier anvild left running and points the endpoint at the default's, if
    // it answers; then calls `serving_again` (anvild starts accepting on the endpoint there), then
    // stops the engines of qualifications a restart cut short. Call once before the first pass.
    void start_up(const std::function<void()>& serving_again = {});
    void pass();
    // On SIGTERM: waits for a running qualification's engine to stop; stops serving engines if asked.
    void shut_down(bool stop_engines);
    // Called (from any thread) when something wants a pass soon: a qualification ended, an API write.
    void set_wake(std::function<void()> wake) { wake_ = std::move(wake); }

    // ---- reads for the API (any thread) ----
    // Each source as last read: where it stands and which documents it refused, and why.
    struct SourceView {
        SourceConfig config;
        std::string commit;
        std::string last_sync_at;
        std::optional<std::string> last_error;
        std::size_t documents = 0;
        std::vector<std::pair<std::string, std::vector<std::string>>> invalid;  // path → problems
    };
    // What the API reads of the controller, as one immutable value published at construction and
    // at the end of every step: a reader takes it whole and never waits for a pass, nor sees one
    // half done.
    struct Snapshot {
        std::map<std::string, Condition> conditions;
        nlohmann::json last_pass = nullptr;  // when it finished, how long, and each step's milliseconds
        std::vector<std::string> not_ready;  // why anvild is not ready; empty when it is
        std::shared_ptr<const registry::Inventory> inventory;  // what feasibility judges with
        std::string inventory_note;                            // where it came from
        std::vector<SourceView> sources;
    };
    std::shared_ptr<const Snapshot> snapshot() const;
    bool ready() const { return snapshot()->not_ready.empty(); }
    std::vector<std::string> not_ready_reasons() const { return snapshot()->not_ready; }
    std::map<std::string, Condition> conditions() const { return snapshot()->conditions; }
    nlohmann::json last_pass() const { return snapshot()->last_pass; }
    std::pair<std::optional<registry::Inventory>, std::string> inventory() const;
    std::vector<SourceView> sources() const { return snapshot()->sources; }
    // Feasibility of the recipe as the registry holds it now, on this machine's inputs.
    std::optional<nlohmann::json> feasibility_of(const std::string& recipe_id) const;
    std::vector<drivers::RunningEngine> engines() const { return engines_->engines(); }
    std::optional<state::Id> qualifying() const { return qualifications_->current(); }
    std::optional<endpoint::Upstream> upstream() const { return endpoint_->current(); }
    const DaemonConfig& config() const { return config_; }
    // The last `lines` lines of a running engine's output (the ledger's engine row id); nothing
    // when anvild does not run that engine now.
    std::optional<std::string> engine_log(state::Id engine_row_id, std::size_t lines) const;
    // An engine's health as measured while the ledger cannot be written (its row then says what
    // was last recorded): "healthy" or "not answering"; nothing otherwise.
    std::optional<std::string> measured_health(state::Id engine_row_id) const;
    // Why this revision's document is not at the synced commit of its source (or not in the
    // ledger), or nothing when it is: what the qualification runner asks before it records.
    std::optional<std::string> not_in_registry(state::Id revision_id) const;

    // What promotion sees now, gathered exactly as the promotion step gathers it: the default and
    // its measurements (the control), the validated revisions at the synced commit with theirs, the
    // thresholds and settings, the choice qualify::choose_promotion makes of them, and each
    // candidate's own qualify::decide against the control (also when a pin or freeze decides).
    struct PromotionPicture {
        std::optional<state::RevisionRow> current;
        std::optional<qualify::Contender> control;
        std::vector<state::RevisionRow> validated;
        std::vector<qualify::Contender> contenders;  // one per validated revision, in its order
        std::vector<qualify::Decision> decisions;    // the same
        qualify::Thresholds thresholds;
        qualify::PolicyState policy;
        qualify::PromotionChoice choice;
    };
    PromotionPicture promotion_picture() const;  // any thread

    // Operator requests (any thread): checked, recorded as intent, then the pass acts.
    OperatorRequests& requests() { return *requests_; }

private:
    // What feasibility reads besides the recipe: licences and hardware records from the catalogs,
    // this host's memory, model shapes. Gathered once per set of commits; shared with API threads.
    struct GateInputs {
        registry::LicenceBook licences;
        std::map<std::string, double> vram_gb;  // hardware id → nominal GB per GPU
        std::optional<registry::EvidenceVariable> host_memory;  // MemTotal, read with the inputs
        // Each model directory's shape (its config.json), read once per directory found.
        std::shared_ptr<std::map<std::string, registry::ModelShapeReading>> model_shapes =
            std::make_shared<std::map<std::string, registry::ModelShapeReading>>();
        std::shared_ptr<std::mutex> model_shapes_mutex = std::make_shared<std::mutex>();
        std::shared_ptr<const registry::Inventory> inventory;  // as it was when these were gathered
    };

    // ---- the steps (one file each) ----
    void registry_step();  // registry_step.cpp
    void ingest(RegistryWatch& watch, const WatchResult& result, state::Id source_id);
    // Retires what must no longer be considered: revisions superseded by a newer one of their recipe,
    // and newest revisions whose document is not at the synced commit of its source (removed, or
    // replaced by a force-push). Level-triggered: finds them whatever pass or crash left them.
    void retire_step();
    // Feasibility of new revisions: a verdict each, and `rejected` for what cannot or must not run.
    void judge(const std::vector<std::pair<state::Id, const registry::Document*>>& revisions);  // judge_step.cpp
    void judge_stragglers();
    // Under a Slurm placement, the cluster's nodes read again: every minute, every 15 s while
    // slurmrestd does not answer (reconciler.cpp).
    void inventory_step();
    void engine_step();         // engine_step.cpp
    void promotion_step();      // promotion_step.cpp
    void serving_step();        // serving_step.cpp
    void qualification_step();  // qualification_step.cpp
    // ledger_step.cpp: whether this pass may write (false while backing off from a ledger that
    // cannot be written, measuring the engines instead), and what the pass's writes showed.
    bool ledger_may_be_written();
    void ledger_outcome(std::uint64_t failures_before);
    void measure_engines_without_ledger();

    // ---- shared by the steps ----
    // Why this revision's document is not at the synced commit of its source, or nothing when it
    // is. Every decision to qualify, validate, pin or promote asks first. Any thread.
    std::optional<std::string> not_in_registry(const std::string& source_url, const std::string& recipe_id, const std::string& sha256) const;
    std::optional<std::string> not_in_registry(const state::RevisionRow& revision) const {
        return not_in_registry(revision.source_url, revision.recipe_id, revision.sha256);
    }
    // Records `moves` in one transaction, or, when the guard refuses one, each on its own.
    void record_transitions(const std::vector<state::TransitionRequest>& moves);
    std::shared_ptr<const GateInputs> gate_inputs() const;  // any thread
    registry::GateContext gate_context(const registry::Recipe& recipe, const std::shared_ptr<const GateInputs>& inputs) const;
    qualify::Contender contender(const state::RevisionRow& revision) const;
    qualify::PolicyState policy_state() const;
    void promote(const state::RevisionRow& revision, const std::string& reason, const std::string& actor);
    void rollback(const std::string& why);
    void set_condition(const std::string& type, bool ok, const std::string& reason, const std::string& message);
    void note(const std::string& key, const std::string& subject, const std::string& message);
    void wake() const {
        if (wake_) wake_();
    }
    // Publishes the snapshot of what the steps have done so far (the sources' views again only
    // when a source was read since the last one).
    void publish();
    // The clock's time as the ledger writes times (ISO 8601, UTC, milliseconds).
    std::string now_text() const;
    // Milliseconds since `t`, for the pass's step timings.
    double ms_since(std::chrono::steady_clock::time_point t) const;

    const DaemonConfig& config_;
    state::Store& store_;
    DaemonMetrics& metrics_;
    // The ports it acts through.
    drivers::EngineFleet* engines_ = nullptr;
    endpoint::UpstreamSwitch* endpoint_ = nullptr;
    Qualifications* qualifications_ = nullptr;
    const Clock* clock_ = nullptr;
    std::function<void()> wake_;
    std::unique_ptr<OperatorRequests> requests_;

    mutable std::mutex mutex_;  // guards what API threads read, below and in each watch
    std::vector<std::unique_ptr<RegistryWatch>> watches_;
    // Set at construction; under a Slurm placement read again by inventory_step (replaced whole,
    // under mutex_, so a reader keeps the one it took).
    std::shared_ptr<const registry::Inventory> inventory_;
    std::string inventory_note_;
    std::uint64_t inventory_generation_ = 0;                  // moves when inventory_ is replaced
    std::map<std::string, Condition> conditions_;  // the reconcile thread's; readers take the snapshot
    nlohmann::json last_pass_ = nullptr;
    bool sources_read_ = true;     // a source was read since the last snapshot (the reconcile thread's)
    bool sources_changed_ = true;  // and its catalog changed
    mutable std::mutex snapshot_mutex_;  // held only to swap or copy the pointer below
    std::shared_ptr<const Snapshot> snapshot_;
    bool force_sync_ = false;
    bool first_pass_done_ = false;
    mutable std::shared_ptr<const GateInputs> gate_inputs_;
    mutable std::string gate_inputs_key_;

    // The reconcile thread's own (no lock): what persists between passes, and the running pass's
    // finer timings.
    PassMemory memory_;
    nlohmann::json step_detail_;
    // Engines' health measured while the ledger cannot be written (the API reads it under mutex_).
    std::map<state::Id, std::string> measured_health_;
};

// Where the endpoint forwards to serve `engine` as the default `recipe_id`.
endpoint::Upstream upstream_of(const drivers::RunningEngine& engine, const std::string& recipe_id);

// Orders candidates for qualification: the most faithful weights first (f32 before bf16/f16
// before 8-bit before fewer bits), so the first default is the natural control for the rest; a
// recipe with a draft right after the plain ones of its weights.
int fidelity_rank(const registry::Recipe& recipe);

}  // namespace anvil::daemon
