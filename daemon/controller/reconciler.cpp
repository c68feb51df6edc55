// The Reconciler's frame: construction (sources, inventory, the parts it acts through), the pass as
// a list of steps, and what the steps share (registry membership, conditions, notes). The steps
// themselves live in *_step.cpp beside this file.
#include "daemon/controller/reconciler.hpp"

#include <set>

#include <spdlog/spdlog.h>

#include "daemon/host/host_inventory.hpp"
#include "support/clock.hpp"

namespace anvil::daemon {

namespace {

using json = nlohmann::json;

// The GPUs as NVML measures them (kernels/hardware). Without a driver, or when NVML fails, an empty
// measured inventory whose source says why: GPU recipes are then rejected on paper, and the rest
// of the daemon runs. (nvidia-smi is no fallback: it is itself a client of libnvidia-ml.)
registry::Inventory measure_inventory(std::string& note) {
    const hardware::InventoryReading reading = hardware::read_inventory();
    if (!reading.ok) {
        note = reading.error + ": judging with no GPU";
        spdlog::warn("GPU inventory: {}", note);
        return host::measured_inventory(reading);
    }
    note = "measured by NVML: " + std::to_string(reading.gpus.size()) + " GPUs, driver " + reading.driver_version +
           ", CUDA " + reading.cuda_driver_version;
    spdlog::info("GPU inventory: {}", note);
    return host::measured_inventory(reading);
}

// The cluster's largest usable node, as the gates judge recipes against it: a job runs an engine on
// one node. Read once, as NVML is; a reload reads it again. Unreachable: no inventory, and the note
// says why, so GPU gates stay unknown rather than failing every recipe.
std::optional<registry::Inventory> cluster_inventory(const drivers::SlurmPlacement& placement, std::string& note) {
    try {
        const registry::SlurmCluster cluster = drivers::SlurmRest(placement.rest).nodes();
        std::string why;
        auto inventory = registry::best_node_inventory(cluster, placement.partition, placement.gpu_memory_mib, why);
        if (!inventory) {
            note = why + ": GPU gates stay unknown";
            spdlog::warn("GPU inventory: {}", note);
            return std::nullopt;
        }
        note = "Slurm: " + inventory->scope + ", " + std::to_string(inventory->gpus.size()) + " GPUs, from " + cluster.source;
        spdlog::info("GPU inventory: {}", note);
        return inventory;
    } catch (const drivers::SlurmError& e) {
        note = std::string(e.what()) + ": GPU gates stay unknown until slurmrestd answers (asked again every 15 s)";
        spdlog::warn("GPU inventory: {}", note);
        return std::nullopt;
    }
}

// The cluster changes under anvild (nodes drained, added, failed): read again this often.
constexpr auto kClusterInventoryEvery = std::chrono::seconds(60);
constexpr auto kClusterInventoryRetry = std::chrono::seconds(15);  // while slurmrestd does not answer

}  // namespace

int SystemClock::local_minute_of_day() const {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    return local.tm_hour * 60 + local.tm_min;
}

Reconciler::Reconciler(const DaemonConfig& config, state::Store& store, ControllerPorts ports, DaemonMetrics& metrics)
    : config_(config), store_(store), metrics_(metrics), engines_(&ports.engines), endpoint_(&ports.endpoint),
      qualifications_(&ports.qualifications), clock_(&ports.clock) {
    // Every time the ledger and the controller store, and every schedule, come from this clock,
    // from the first write on; the destructor gives the ledger the system's back.
    store_.use_clock([clock = clock_] { return clock->system(); });
    // Which file owns each recipe id, as the ledger last saw it: the first read after a restart
    // keeps every id with that file, so a newcomer cannot take it by sorting first.
    const auto heads = store_.latest_revision_heads();
    for (const auto& source : config.sources) {
        watches_.push_back(std::make_unique<RegistryWatch>(source, config.data_dir));
        memory_.source_ids[source.name] = store_.upsert_source(source.url, source.ref);
        std::map<std::string, std::string> paths;
        for (const auto& head : heads)
            if (head.source_url == source.url) paths.emplace(head.recipe_id, head.path);
        watches_.back()->remember_recipe_paths(paths);
    }
    std::optional<registry::Inventory> inventory;
    if (config.slurm) {
        inventory = cluster_inventory(*config.slurm, inventory_note_);  // the next read is scheduled once the clock is given
    } else if (config.inventory_mode == "declared" && config.inventory) {
        inventory = config.inventory;
        inventory_note_ = "declared in " + config.config_file.string();
    } else if (config.inventory_mode == "auto") {
        inventory = measure_inventory(inventory_note_);
    } else {
        inventory_note_ = "no inventory (configuration says none): GPU gates stay unknown";
    }
    // A collective probe (`anvil probe collectives`) proves or disproves the GPUs' all-reduce path
    // for the tensor-parallel gate; its newest receipt counts only over exactly these GPUs.
    if (!config.slurm && inventory && !inventory->gpus.empty()) {
        if (auto receipt = hardware::latest_probe_receipt(config.data_dir / "receipts" / "collectives")) {
            host::apply_probe_receipt(*inventory, *receipt);
            inventory_note_ += "; collectives from probe receipt " + receipt->path.filename().string();
        }
    }
    if (inventory) inventory_ = std::make_shared<const registry::Inventory>(std::move(*inventory));
    if (config_.slurm) memory_.next_inventory_read = clock_->steady() + (inventory_ ? kClusterInventoryEvery : kClusterInventoryRetry);
    requests_ = std::make_unique<OperatorRequests>(
        store_, store_, *qualifications_, *clock_, [this](const state::RevisionRow& r) { return not_in_registry(r); },
        [this] {
            {
                std::lock_guard lock(mutex_);
                force_sync_ = true;
            }
            wake();
        },
        [this] { wake(); });
    publish();
}

void Reconciler::inventory_step() {
    if (!config_.slurm || clock_->steady() < memory_.next_inventory_read) return;
    std::string note;
    auto inventory = cluster_inventory(*config_.slurm, note);
    memory_.next_inventory_read = clock_->steady() + (inventory ? kClusterInventoryEvery : kClusterInventoryRetry);
    std::lock_guard lock(mutex_);
    // A changed node set or GPU count shows in the note; the first answer after none is a change too.
    if (note == inventory_note_ && bool(inventory) == bool(inventory_)) return;
    spdlog::info("GPU inventory now: {}", note);
    inventory_ = inventory ? std::make_shared<const registry::Inventory>(std::move(*inventory)) : nullptr;
    inventory_note_ = note;
    ++inventory_generation_;
}

std::optional<std::string> Reconciler::not_in_registry(state::Id revision_id) const {
    const auto revision = store_.revision(revision_id);
    if (!revision) return "revision " + std::to_string(revision_id) + " is not in the ledger";
    return not_in_registry(*revision);
}

Reconciler::~Reconciler() {
    qualifications_->cancel_and_wait();
    store_.use_clock({});  // the clock may go with its owner; the ledger outlives both (a reload)
}

void Reconciler::start_up(const std::function<void()>& serving_again) {
    engines_->adopt();
    // The default's engine of the earlier run, adopted and answering, is where the endpoint
    // forwards before it takes a request: clients of a restarted anvild see no 503 in between.
    if (const auto current = store_.current_default(); current && !endpoint_->current())
        if (const auto engine = engines_->serving_for(current->id); engine && engines_->answers(*engine)) {
            endpoint_->switch_to(upstream_of(*engine, current->recipe_id));
            spdlog::info("endpoint: forwarding to the adopted engine {} of the default {}", engine->handle.engine_id, current->recipe_id);
        }
    if (serving_again) serving_again();
    // A qualification cut short by a restart starts over; its engine is of no further use.
    for (const auto& e : engines_->engines())
        if (e.role != drivers::EngineRole::serving) engines_->stop(e, std::chrono::seconds(5));
}

endpoint::Upstream upstream_of(const drivers::RunningEngine& engine, const std::string& recipe_id) {
    endpoint::Upstream next;
    next.host = engine.handle.host;
    next.port = engine.handle.port;
    next.model = engine.handle.served_model_name;
    next.engine_id = engine.handle.engine_id;
    next.recipe_id = recipe_id;
    next.api_key = engine.handle.api_key;
    return next;
}

void Reconciler::shut_down(bool stop_engines) {
    // A qualification can take minutes (a large model loading, then its requests): stopping or
    // reloading does not wait for it; it is cut short and runs again from the start.
    qualifications_->cancel_and_wait();
    if (stop_engines)
        for (const auto& e : engines_->engines()) engines_->stop(e);
}

std::string Reconciler::now_text() const { return support::format_utc(clock_->system(), support::Precision::milliseconds); }

double Reconciler::ms_since(std::chrono::steady_clock::time_point t) const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// ---------------------------------------------------------------- the pass

void Reconciler::pass() {
    // Timings are wall time whatever clock_ says: they measure this process, not the scenario.
    const auto started = std::chrono::steady_clock::now();
    json steps = json::object();
    step_detail_ = json::object();
    auto finish = [&] {
        const double seconds = ms_since(started) / 1000.0;
        metrics_.record_pass(seconds);
        {
            std::lock_guard lock(mutex_);
            first_pass_done_ = true;
            last_pass_ = {{"finished_at", now_text()}, {"seconds", seconds}, {"steps", steps}};
        }
        publish();
    };
    if (!ledger_may_be_written()) {
        steps["ledger"] = "cannot be written: waiting";
        return finish();
    }
    const std::uint64_t failures_before = store_.write_failures().count;
    // The steps in order, each with the one whose work it builds on: a step that throws is named in
    // the Reconciling condition, the steps that need it wait for the next pass, and the rest run.
    struct Step {
        const char* name;
        void (Reconciler::*run)();
        const char* needs;
    };
    static constexpr Step kSteps[] = {
        {"inventory", &Reconciler::inventory_step, nullptr},
        // Retiring against a catalog whose new revisions the ledger did not take would retire
        // the heads they replace.
        {"registry", &Reconciler::registry_step, nullptr},
        {"retire", &Reconciler::retire_step, "registry"},
        {"judge", &Reconciler::judge_stragglers, nullptr},
        {"engines", &Reconciler::engine_step, nullptr},
        {"promotion", &Reconciler::promotion_step, nullptr},
        {"serving", &Reconciler::serving_step, nullptr},
        // The serving step pauses and resumes the default around an exclusive qualification.
        {"qualification", &Reconciler::qualification_step, "serving"},
    };
    std::set<std::string> failed;
    std::string failures;
    std::optional<std::string> stopped_by_ledger;  // the step a lasting write failure stopped the pass at
    for (const Step& s : kSteps) {
        const std::string key = std::string(s.name) + "_ms";
        if (s.needs && failed.count(s.needs)) {
            failed.insert(s.name);
            steps[key] = std::string("skipped: the ") + s.needs + " step failed";
            continue;
        }
        const auto t = std::chrono::steady_clock::now();
        try {
            (this->*s.run)();
            steps[key] = ms_since(t);
            publish();
        } catch (const state::StoreError& e) {
            // A write that failed for a lasting cause ends the pass: the ledger step says so and backs off.
            if (state::lasting_write_failure(e.sqlite_code) && store_.write_failures().count != failures_before) {
                steps[key] = std::string("stopped: the ledger refuses writes: ") + e.what();
                stopped_by_ledger = s.name;
                break;
            }
            failed.insert(s.name);
            failures += std::string(failures.empty() ? "" : "; ") + s.name + " step: " + e.what();
            steps[key] = std::string("failed: ") + e.what();
        } catch (const std::exception& e) {
            failed.insert(s.name);
            failures += std::string(failures.empty() ? "" : "; ") + s.name + " step: " + e.what();
            steps[key] = std::string("failed: ") + e.what();
        }
    }
    if (stopped_by_ledger) {
        set_condition("Reconciling", false, "StoppedByLedger",
                      "the pass stopped at the " + *stopped_by_ledger + " step: the ledger refuses writes (see LedgerWritable)" +
                          (failures.empty() ? std::string() : "; " + failures));
    } else if (failures.empty()) {
        set_condition("Reconciling", true, "EveryStepRan", "every step of the last pass ran");
    } else {
        spdlog::error("reconcile pass: {}; the next pass tries again", failures);
        set_condition("Reconciling", false, "StepFailed", failures + "; the next pass tries again");
    }
    ledger_outcome(failures_before);
    steps.update(step_detail_);
    finish();
}

// ---------------------------------------------------------------- shared by the steps

std::optional<std::string> Reconciler::not_in_registry(const std::string& source_url, const std::string& recipe_id,
                                                       const std::string& sha256) const {
    std::lock_guard lock(mutex_);  // the registry step swaps catalogs in; the runner asks from its thread
    std::optional<std::string> why;
    for (const auto& watch : watches_) {
        if (!source_url.empty() && watch->config().url != source_url) continue;
        const auto& catalog = watch->catalog();
        const std::string at = catalog.commit().empty() ? std::string() : " at commit " + catalog.commit().substr(0, 12);
        if (!watch->read_once()) {
            why = "registry " + watch->config().name + " has not been read yet";
            continue;
        }
        const auto* doc = catalog.find(registry::DocumentKind::recipe, recipe_id);
        if (doc && catalog.usable(*doc) && doc->provenance.sha256 == sha256) return std::nullopt;
        if (doc && catalog.usable(*doc))
            why = "replaced in registry " + watch->config().name + at + " (" + doc->provenance.path + " holds other bytes)";
        else
            why = "removed from registry " + watch->config().name + at;
    }
    if (!why) why = "its source " + (source_url.empty() ? std::string("(none)") : source_url) + " is not configured";
    return why;
}

void Reconciler::record_transitions(const std::vector<state::TransitionRequest>& moves) {
    if (moves.empty()) return;
    try {
        store_.transition_batch(moves);
    } catch (const state::TransitionRefused& e) {
        // One refused move must not hold back the rest: record them one by one.
        spdlog::warn("{}; recording the moves one by one", e.what());
        for (const auto& m : moves) {
            try {
                store_.transition(m);
            } catch (const state::TransitionRefused& one) {
                spdlog::warn("{}", one.what());
            }
        }
    }
}

void Reconciler::set_condition(const std::string& type, bool ok, const std::string& reason, const std::string& message) {
    std::lock_guard lock(mutex_);  // the API reads conditions from its own threads
    auto& c = conditions_[type];
    if (c.ok != ok || c.reason != reason || c.since.empty()) c.since = now_text();
    c.ok = ok;
    c.reason = reason;
    c.message = message;
}

void Reconciler::note(const std::string& key, const std::string& subject, const std::string& message) {
    auto& last = memory_.last_notes[key];
    if (last == message) return;
    last = message;
    store_.append_event("decision", subject, message);
}

// ---------------------------------------------------------------- reads for the API

std::optional<std::string> Reconciler::engine_log(state::Id engine_row_id, std::size_t lines) const {
    for (const auto& e : engines_->engines())
        if (e.row_id == engine_row_id) return engines_->logs(e, lines);
    return std::nullopt;
}

std::shared_ptr<const Reconciler::Snapshot> Reconciler::snapshot() const {
    std::lock_guard lock(snapshot_mutex_);
    return snapshot_;
}

std::pair<std::optional<registry::Inventory>, std::string> Reconciler::inventory() const {
    const auto s = snapshot();
    return {s->inventory ? std::optional(*s->inventory) : std::nullopt, s->inventory_note};
}

void Reconciler::publish() {
    auto next = std::make_shared<Snapshot>();
    const auto previous = snapshot();
    {
        // Only this thread changes what is read here; the lock is for the runner and the API's
        // feasibility reads, which take catalogs and the inventory under it.
        std::lock_guard lock(mutex_);
        next->conditions = conditions_;
        next->last_pass = last_pass_;
        for (const auto& w : watches_)
            if (!w->read_once())
                next->not_ready.push_back("source " + w->config().name + " not read yet" + (w->last_error() ? ": " + *w->last_error() : ""));
        if (!first_pass_done_) next->not_ready.push_back("first reconcile pass");
        next->inventory = inventory_;
        next->inventory_note = inventory_note_;
        if (sources_read_ || !previous) {
            // The refused documents are listed again only when a catalog changed (a pass over
            // every document); a poll that found nothing new updates the rest of the view.
            const bool relist = sources_changed_ || !previous || previous->sources.size() != watches_.size();
            for (std::size_t i = 0; i < watches_.size(); ++i) {
                const auto& w = watches_[i];
                SourceView v{w->config(), w->catalog().commit(), w->last_sync_at(), w->last_error(), w->catalog().size(), {}};
                if (!relist) v.invalid = previous->sources[i].invalid;
                else
                    for (const auto& [path, doc] : w->catalog().documents())
                        if (!w->catalog().usable(doc)) v.invalid.emplace_back(path, w->catalog().problems(doc));
                next->sources.push_back(std::move(v));
            }
        } else {
            next->sources = previous->sources;
        }
    }
    sources_read_ = sources_changed_ = false;
    std::lock_guard lock(snapshot_mutex_);
    snapshot_ = std::move(next);
}

}  // namespace anvil::daemon
