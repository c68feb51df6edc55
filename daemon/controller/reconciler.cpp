#include "daemon/anvild/reconciler.hpp"

#include <algorithm>
#include <ctime>

#include <spdlog/spdlog.h>

#include "engine/supervisor/readiness.hpp"
#include "kernels/hardware/collective_probe.hpp"
#include "kernels/hardware/nvml_inventory.hpp"
#include "registry/host_memory.hpp"

namespace anvil::daemon {

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;
using state::Status;

constexpr const char* kPinKey = "promotion.pin";
constexpr const char* kFreezeKey = "promotion.freeze";
constexpr const char* kLastPromotionKey = "promotion.last";
constexpr int kRollbackAfterFailures = 3;
constexpr auto kProbation = std::chrono::minutes(10);  // a new default that cannot serve this soon is rolled back

std::string weights_of(const registry::Recipe& r) {
    const auto& args = r.launch.arguments;
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--weights" && i + 1 < args.size()) return args[i + 1];
        if (args[i].starts_with("--weights=")) return args[i].substr(10);
        if ((args[i] == "--dtype" || args[i] == "--quantization") && i + 1 < args.size()) return args[i + 1];
    }
    return r.launch.model ? r.launch.model->dtype : std::string();
}

std::chrono::system_clock::time_point parse_time(const std::string& iso) {
    std::tm tm{};
    if (!strptime(iso.c_str(), "%Y-%m-%dT%H:%M:%S", &tm)) return {};
    return std::chrono::system_clock::from_time_t(timegm(&tm));
}

std::optional<registry::Document> document_of(const state::RevisionRow& revision) {
    registry::Provenance p;
    p.source_url = revision.source_url;
    p.commit = revision.commit_id;
    p.path = revision.path;
    p.blob_id = revision.blob_id;
    registry::Document doc = registry::parse_document(revision.document.dump(), p);
    if (!doc.recipe()) return std::nullopt;
    return doc;
}

// "HH:MM-HH:MM", local time, may wrap midnight.
bool inside_window(const std::string& window) {
    int h1 = 0, m1 = 0, h2 = 0, m2 = 0;
    if (std::sscanf(window.c_str(), "%d:%d-%d:%d", &h1, &m1, &h2, &m2) != 4) return false;
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    const int t = local.tm_hour * 60 + local.tm_min, a = h1 * 60 + m1, b = h2 * 60 + m2;
    return a <= b ? (t >= a && t < b) : (t >= a || t < b);
}

// The GPUs as NVML measures them (kernels/hardware). Without a driver, or when NVML fails, an empty
// measured inventory whose source says why: GPU recipes are then rejected on paper, and the rest
// of the daemon runs. (nvidia-smi is no fallback: it is itself a client of libnvidia-ml.)
registry::Inventory measure_inventory(std::string& note) {
    hardware::InventoryReading reading = hardware::read_inventory();
    if (!reading.ok) {
        note = reading.error + ": judging with no GPU";
        spdlog::warn("GPU inventory: {}", note);
        return reading.inventory;
    }
    note = "measured by NVML: " + std::to_string(reading.inventory.gpus.size()) + " GPUs, driver " +
           reading.inventory.driver_version + ", CUDA " + reading.inventory.cuda_driver_version;
    spdlog::info("GPU inventory: {}", note);
    return reading.inventory;
}

}  // namespace

int fidelity_rank(const registry::Recipe& recipe) {
    std::string w = weights_of(recipe);
    std::transform(w.begin(), w.end(), w.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    int rank = 3;
    if (w == "f32" || w == "fp32" || w == "float32") rank = 0;
    else if (w == "bf16" || w == "f16" || w == "fp16" || w == "bfloat16" || w == "float16" || w == "auto") rank = 1;
    else if (w == "q8" || w == "int8" || w == "fp8" || w.find("8") != std::string::npos) rank = 2;
    else if (w.empty()) rank = 4;
    // A speculative recipe answers as its weights do, but it is measured against the plain one:
    // right after it, so that the plain one is the control it has to beat.
    return 2 * rank + (recipe.launch.draft ? 1 : 0);
}

Reconciler::Reconciler(const DaemonConfig& config, state::Store& store, endpoint::StableEndpoint& endpoint, DaemonMetrics& metrics)
    : config_(config),
      store_(store),
      endpoint_(endpoint),
      metrics_(metrics),
      engines_(supervisor_settings(config), store),
      runner_(config, store, engines_, [this](state::Id id) -> std::optional<std::string> {
          const auto revision = store_.revision(id);
          if (!revision) return "revision " + std::to_string(id) + " is not in the ledger";
          return not_in_registry(*revision);
      }) {
    // Which file owns each recipe id, as the ledger last saw it: the first read after a restart
    // keeps every id with that file, so a newcomer cannot take it by sorting first.
    const auto heads = store_.latest_revision_heads();
    for (const auto& source : config.sources) {
        watches_.push_back(std::make_unique<RegistryWatch>(source, config.data_dir));
        source_ids_[source.name] = store_.upsert_source(source.url, source.ref);
        std::map<std::string, std::string> paths;
        for (const auto& head : heads)
            if (head.source_url == source.url) paths.emplace(head.recipe_id, head.path);
        watches_.back()->remember_recipe_paths(paths);
    }
    if (config.inventory_mode == "declared" && config.inventory) {
        inventory_ = config.inventory;
        inventory_note_ = "declared in " + config.config_file.string();
    } else if (config.inventory_mode == "auto") {
        inventory_ = measure_inventory(inventory_note_);
    } else {
        inventory_note_ = "no inventory (configuration says none): GPU gates stay unknown";
    }
    // A collective probe (`anvil probe collectives`) proves or disproves the GPUs' all-reduce path
    // for the tensor-parallel gate; its newest receipt counts only over exactly these GPUs.
    if (inventory_ && !inventory_->gpus.empty()) {
        if (auto receipt = hardware::latest_probe_receipt(config.data_dir / "receipts" / "collectives")) {
            hardware::apply_probe_receipt(*inventory_, *receipt);
            inventory_note_ += "; collectives from probe receipt " + receipt->path.filename().string();
        }
    }
}

Reconciler::~Reconciler() {
    runner_.cancel();
    runner_.wait();
}

json Reconciler::inventory_json() const {
    std::lock_guard lock(mutex_);
    return {{"source", inventory_note_}, {"inventory", inventory_ ? inventory_->to_json() : json(nullptr)}};
}

void Reconciler::start_up() {
    engines_.adopt();
    // A qualification cut short by a restart starts over; its engine is of no further use.
    for (const auto& e : engines_.engines())
        if (e.role != driver::EngineRole::serving) engines_.stop(e, std::chrono::seconds(5));
}

void Reconciler::shut_down(bool stop_engines) {
    // A qualification can take minutes (a large model loading, then its requests): stopping or
    // reloading does not wait for it; it is cut short and runs again from the start.
    runner_.cancel();
    runner_.wait();
    if (stop_engines)
        for (const auto& e : engines_.engines()) engines_.stop(e);
}

// ---------------------------------------------------------------- the pass

void Reconciler::pass() {
    const auto started = Clock::now();
    json steps = json::object();
    step_detail_ = json::object();
    auto step = [&](const char* name, void (Reconciler::*run)()) {
        const auto t = Clock::now();
        (this->*run)();
        steps[name] = std::chrono::duration<double, std::milli>(Clock::now() - t).count();
    };
    step("registry_ms", &Reconciler::registry_step);
    step("retire_ms", &Reconciler::retire_step);
    step("judge_ms", &Reconciler::judge_stragglers);
    step("engines_ms", &Reconciler::engine_step);
    step("promotion_ms", &Reconciler::promotion_step);
    step("serving_ms", &Reconciler::serving_step);
    step("qualification_ms", &Reconciler::qualification_step);
    steps.update(step_detail_);
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    metrics_.record_pass(seconds);
    std::lock_guard lock(mutex_);
    first_pass_done_ = true;
    last_pass_ = {{"finished_at", state::now_iso8601()}, {"seconds", seconds}, {"steps", steps}};
}

void Reconciler::registry_step() {
    const auto now = Clock::now();
    bool force = false;
    {
        std::lock_guard lock(mutex_);
        force = std::exchange(force_sync_, false);
    }
    for (auto& watch : watches_) {
        if (!force && !watch->due(now)) continue;
        WatchResult result;
        const auto polled = Clock::now();
        std::optional<std::string> error;
        std::string commit;
        {
            std::lock_guard lock(mutex_);  // API threads read the catalog
            result = watch->poll();
            error = watch->last_error();
            commit = watch->catalog().commit();
        }
        step_detail_["registry_poll_ms"] = std::chrono::duration<double, std::milli>(Clock::now() - polled).count();
        if (error) set_condition("RegistryReachable:" + watch->config().name, false, "FetchFailed", *error);
        else set_condition("RegistryReachable:" + watch->config().name, true, "Synced", commit.empty() ? "read from the filesystem" : "at commit " + commit);
        if (result.changed) {
            const auto t = Clock::now();
            ingest(*watch, result, source_ids_.at(watch->config().name));
            step_detail_["registry_ingest_ms"] = std::chrono::duration<double, std::milli>(Clock::now() - t).count();
        }
    }
}

void Reconciler::ingest(RegistryWatch& watch, const WatchResult& result, state::Id source_id) {
    // Each piece timed on its own: most of an incremental pass is spent here, in commits.
    auto timed = [this](const char* name, auto&& work) {
        const auto t = Clock::now();
        work();
        step_detail_[name] = std::chrono::duration<double, std::milli>(Clock::now() - t).count();
    };
    // The commit read and the revisions it brought: one transaction, one fsync.
    std::vector<state::Store::Ingested> ingested;
    timed("ingest_revisions_ms", [&] {
        const bool record = source_id > 0 && watch.is_git();
        if (record || !result.changed_recipes.empty())
            ingested = store_.ingest_revisions(source_id, result.changed_recipes, "reconciler", record ? &result.report : nullptr);
    });
    std::vector<std::pair<state::Id, const registry::Document*>> created;
    for (std::size_t i = 0; i < ingested.size(); ++i)
        if (ingested[i].created) created.emplace_back(ingested[i].revision_id, result.changed_recipes[i]);
    timed("ingest_judge_ms", [&] { judge(created); });
    // Recipes gone from the registry are retired by the retire step, which runs next.
    spdlog::info("registry {}: {} {} ({} recipe documents changed, {} new revisions, {} recipes removed)", watch.config().name,
                 registry::to_string(result.report.mode), watch.catalog().commit().empty() ? "directory" : watch.catalog().commit().substr(0, 12),
                 result.changed_recipes.size(), created.size(), result.removed_recipe_ids.size());
    if (!created.empty() || !result.removed_recipe_ids.empty())
        store_.append_event("registry", watch.config().name,
                            std::to_string(created.size()) + " new revisions, " + std::to_string(result.removed_recipe_ids.size()) + " recipes removed",
                            {{"commit", watch.catalog().commit()}, {"mode", std::string(registry::to_string(result.report.mode))}});
}

std::optional<std::string> Reconciler::not_in_registry(const std::string& source_url, const std::string& recipe_id,
                                                       const std::string& sha256) const {
    std::lock_guard lock(mutex_);  // the registry step replaces catalogs; the runner asks from its thread
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

void Reconciler::retire_step() {
    std::string key = std::to_string(store_.write_generation());
    {
        std::lock_guard lock(mutex_);
        for (const auto& watch : watches_) {
            // Until every source has been read, absence proves nothing: retire nothing.
            if (!watch->read_once()) return;
            key += ";" + watch->catalog().commit() + ":" + std::to_string(watch->catalog().size());
        }
    }
    if (key == retire_checked_key_) return;
    const auto running = runner_.current();
    std::vector<state::TransitionRequest> retire;
    // A revision under qualification is withdrawn first (its engine stops); it is retired at the
    // pass after the runner lets it go, so the runner and the pass never record it both.
    auto withdraw_or_retire = [&](state::Id id, Status status, const std::string& reason, std::optional<std::string> commit) {
        if (status == Status::qualifying && running == id) {
            runner_.withdraw(id, reason);
            return;
        }
        retire.push_back({id, Status::retired, reason, "reconciler", {}, {}, std::move(commit)});
    };
    for (const auto& r : store_.superseded_open_revisions())
        withdraw_or_retire(r.revision_id, r.status, "superseded by revision " + std::to_string(r.newest_revision_id), std::nullopt);
    for (const auto& head : store_.latest_revision_heads()) {
        if (head.status == Status::retired || head.status == Status::rejected) continue;
        const auto why = not_in_registry(head.source_url, head.recipe_id, head.sha256);
        if (!why) continue;
        // The default too: the ledger never serves what the registry no longer holds. The promotion
        // step then makes the best validated recipe the default, and until one is, nothing serves.
        if (head.status == Status::promoted)
            store_.append_event("registry", head.recipe_id, "the default " + head.recipe_id + " was " + *why + "; retiring it and stopping its engine");
        std::optional<std::string> commit;
        for (const auto& watch : watches_)
            if (watch->config().url == head.source_url && !watch->catalog().commit().empty()) commit = watch->catalog().commit();
        withdraw_or_retire(head.revision_id, head.status, *why, commit);
    }
    if (retire.empty()) {
        retire_checked_key_ = key;
        return;
    }
    for (const auto& r : retire) spdlog::info("retiring revision {}: {}", r.revision_id, r.reason);
    record_transitions(retire);
    // The transitions moved the write generation: the next pass looks again, and finds nothing.
}

const Reconciler::GateInputs& Reconciler::gate_inputs() const {
    // Licences and hardware records change only with a catalog: gathered once per set of commits,
    // not once per recipe judged (10,000 recipes would otherwise read 10,000 documents each).
    std::string key;
    for (const auto& watch : watches_) key += watch->catalog().commit() + ":" + std::to_string(watch->catalog().size()) + ";";
    if (gate_inputs_ && gate_inputs_key_ == key) return *gate_inputs_;
    GateInputs inputs;
    for (const auto& watch : watches_) {
        for (const auto& [path, doc] : watch->catalog().documents()) {
            if (!doc.valid()) continue;
            if (doc.kind == registry::DocumentKind::external_priors) {
                if (const auto* priors = std::get_if<registry::ExternalPriors>(&doc.body)) inputs.licences.add(*priors, path);
            } else if (doc.kind == registry::DocumentKind::hardware) {
                if (const auto* rec = std::get_if<registry::RegistryRecord>(&doc.body); rec && rec->vram_gb) inputs.vram_gb.emplace(doc.id, *rec->vram_gb);
            }
        }
    }
    inputs.host_memory = registry::measure_host_memory();
    gate_inputs_ = std::move(inputs);
    gate_inputs_key_ = key;
    return *gate_inputs_;
}

registry::GateContext Reconciler::gate_context(const registry::Recipe& recipe) const {
    const GateInputs& inputs = gate_inputs();
    registry::GateContext ctx;
    ctx.inventory = inventory_ ? &*inventory_ : nullptr;
    ctx.requirements = config_.requirements ? &*config_.requirements : nullptr;
    ctx.policy.commercial = config_.commercial;
    ctx.licences = &inputs.licences;
    if (auto it = inputs.vram_gb.find(recipe.hardware_id); it != inputs.vram_gb.end()) ctx.hardware_vram_gb = it->second;
    ctx.host_memory = inputs.host_memory;
    // A model's shape is read where a launch would find it: placeholders expanded, inside the
    // allowed roots (a path that is not is refused on paper anyway, and says so there).
    ctx.model_shapes = [this, cache = inputs.model_shapes](const registry::ModelRef& model) -> registry::ModelShapeReading {
        std::filesystem::path dir;
        try {
            dir = engines_.model_directory(model, "model directory");
        } catch (const std::exception& e) {
            return {std::nullopt, e.what()};
        }
        if (auto it = cache->find(dir.string()); it != cache->end()) return it->second;
        // Only a shape is kept: a directory not there yet (a model still being made) is read again.
        auto reading = registry::read_model_shape(dir);
        if (reading.shape) cache->emplace(dir.string(), reading);
        return reading;
    };
    return ctx;
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

void Reconciler::judge(const std::vector<std::pair<state::Id, const registry::Document*>>& revisions) {
    if (revisions.empty()) return;
    // On paper first (pure), then every verdict and refusal of the batch in two transactions.
    std::vector<state::VerdictRow> verdicts;
    std::vector<std::string> refusal_reasons;
    {
        std::lock_guard lock(mutex_);
        for (const auto& [revision_id, doc] : revisions) {
            const registry::Recipe& recipe = *doc->recipe();
            const auto a = registry::assess_recipe(recipe, doc->pins, registry::models_of(*doc), gate_context(recipe));
            std::vector<std::string> refusals;
            const bool infeasible = a.verdict == registry::Verdict::proven_infeasible || a.verdict == registry::Verdict::modeled_infeasible ||
                                    a.verdict == registry::Verdict::policy_infeasible;
            if (infeasible) refusals = a.reasons;
            if (!doc->pins.pinned())
                for (const auto& r : doc->pins.unpinned_reasons) refusals.push_back("unpinned: " + r);
            if (auto why = engines_.unsupported(recipe)) refusals.push_back(*why);
            std::vector<std::string> reasons = a.reasons;
            for (const auto& g : a.gates)
                reasons.push_back(std::string(registry::to_string(g.name)) + "=" + std::string(registry::to_string(g.status)) + ": " + g.reason);
            const state::GateResult result = !refusals.empty() ? state::GateResult::fail
                                             : a.verdict == registry::Verdict::benchmark_survivor ? state::GateResult::pass
                                                                                                  : state::GateResult::unknown;
            verdicts.push_back({0, revision_id, "feasibility", result, std::string(registry::to_string(a.verdict)), reasons, {}, ""});
            std::string reason;
            for (std::size_t i = 0; i < refusals.size(); ++i) reason += (i ? "; " : "refused on paper: ") + refusals[i];
            refusal_reasons.push_back(reason);
        }
    }
    const auto ids = store_.add_verdicts(verdicts);
    std::vector<state::TransitionRequest> rejections;
    for (std::size_t i = 0; i < revisions.size(); ++i)
        if (!refusal_reasons[i].empty())
            rejections.push_back({revisions[i].first, Status::rejected, refusal_reasons[i], "reconciler", {}, {ids[i]}, std::nullopt});
    record_transitions(rejections);
}

void Reconciler::judge_stragglers() {
    std::vector<registry::Document> docs;
    std::vector<state::Id> ids;
    for (state::Id id : store_.candidates_without_feasibility(1000)) {
        auto revision = store_.revision(id);
        if (!revision) continue;
        if (auto doc = document_of(*revision)) docs.push_back(std::move(*doc)), ids.push_back(id);
    }
    std::vector<std::pair<state::Id, const registry::Document*>> batch;
    for (std::size_t i = 0; i < docs.size(); ++i) batch.emplace_back(ids[i], &docs[i]);
    judge(batch);
}

void Reconciler::engine_step() {
    for (const auto& e : engines_.check()) {
        if (e.role == driver::EngineRole::serving) {
            metrics_.record_engine_restart();
            store_.append_event("engine", e.handle.recipe.recipe_id, "serving engine " + e.handle.engine_id + " exited; restarting it");
        }
    }
}

// ---------------------------------------------------------------- qualification

void Reconciler::qualification_step() {
    if (runner_.busy()) return;
    {
        std::lock_guard lock(mutex_);
        if (exclusive_qualification_) {
            exclusive_qualification_ = false;  // the serving step brings the default back
            wake();
        }
    }
    if (resume_after_exclusive_) {
        store_.append_event("qualification", resume_after_exclusive_->first,
                            "exclusive qualification of " + resume_after_exclusive_->second + " over: the default serves again");
        resume_after_exclusive_.reset();
    }
    const auto now = Clock::now();
    std::optional<state::RevisionRow> next;
    // The move to `qualifying`, made only once nothing (the exclusive window) holds the run back:
    // a revision that waits for the window stays what it was.
    std::optional<state::TransitionRequest> begin;
    // Only a revision whose document is at the synced commit is qualified; the retire step retires
    // the others, so one skipped here is on its way out.
    auto in_registry = [this](const state::RevisionRow& r) {
        const auto why = not_in_registry(r);
        if (why) note("absent:" + std::to_string(r.id), r.recipe_id, "revision " + std::to_string(r.id) + " is not qualified: " + *why);
        return !why;
    };
    // 1. A revision already `qualifying` (asked for through the API, or cut short by a restart).
    for (auto& r : store_.latest_revisions_with_status(Status::qualifying, 100))
        if (in_registry(r)) {
            next = std::move(r);
            break;
        }
    // 2. A failed one whose backoff has run out.
    if (!next) {
        for (auto& r : store_.latest_revisions_with_status(Status::failed, 100)) {
            if (!in_registry(r)) continue;
            auto& b = retry_backoff_[r.id];
            if (b.failures == 0) {
                const auto detail = store_.recipe(r.recipe_id);
                for (const auto& t : detail ? detail->history : std::vector<state::TransitionRow>{})
                    if (t.revision_id == r.id && t.to == Status::failed) ++b.failures;
                const auto delay = std::min(config_.promotion.retry_backoff_max, config_.promotion.retry_backoff_min * (1 << std::min(b.failures - 1, 16)));
                b.next = now + delay;
            }
            if (now < b.next) continue;
            begin = state::TransitionRequest{r.id, Status::qualifying, "retrying after " + std::to_string(b.failures) + " failed qualification(s)",
                                             "reconciler", {}, {}, std::nullopt};
            next = r;
            break;
        }
    }
    // 3. The most faithful candidate that passed on paper.
    if (!next) {
        std::optional<std::pair<int, state::RevisionRow>> best;
        for (state::Id id : store_.latest_revision_ids_with_status(Status::candidate)) {
            auto rank = fidelity_ranks_.find(id);
            std::optional<state::RevisionRow> row;
            if (rank == fidelity_ranks_.end()) {
                row = store_.revision(id);
                auto doc = row ? document_of(*row) : std::nullopt;
                rank = fidelity_ranks_.emplace(id, doc ? fidelity_rank(*doc->recipe()) : 99).first;
            }
            if (best && rank->second >= best->first) continue;
            if (!row) row = store_.revision(id);
            if (row && row->status == Status::candidate && in_registry(*row)) best = std::make_pair(rank->second, std::move(*row));
        }
        if (best) {
            begin = state::TransitionRequest{best->second.id, Status::qualifying, "passed on paper; qualifying on this machine", "reconciler", {}, {},
                                             best->second.commit_id.empty() ? std::nullopt : std::optional(best->second.commit_id)};
            next = best->second;
        }
    }
    if (!next) {
        set_condition("Qualification", true, "Idle", "no revision waits for qualification");
        return;
    }

    auto doc = document_of(*next);
    if (!doc) return;
    QualificationJob job{next->id, *doc->recipe(), next->sha256, next->commit_id, std::nullopt};
    if (auto control = store_.current_default()) job.control_revision = control->id;

    // Two engines that cannot run side by side: qualify only inside the exclusive window, with the
    // default paused; the serving step restores it afterwards whatever the outcome.
    if (job.control_revision && inventory_) {
        auto control = store_.current_default();
        auto control_doc = control ? document_of(*control) : std::nullopt;
        if (control_doc && !job.recipe.runs_on_cpu() && !control_doc->recipe()->runs_on_cpu() &&
            job.recipe.hardware_count + control_doc->recipe()->hardware_count > static_cast<std::int64_t>(inventory_->gpus.size())) {
            const auto& window = config_.promotion.exclusive_window;
            if (!window || !inside_window(*window)) {
                set_condition("Qualification", false, "OutsideExclusiveWindow",
                              next->recipe_id + " and the default cannot run together; qualification waits for the window " +
                                  window.value_or("(none configured)"));
                return;
            }
            store_.append_event("qualification", control->recipe_id,
                                "paused inside the exclusive window " + *window + " to qualify " + next->recipe_id +
                                    ": the two need " + std::to_string(job.recipe.hardware_count + control_doc->recipe()->hardware_count) +
                                    " GPUs, the inventory has " + std::to_string(inventory_->gpus.size()));
            resume_after_exclusive_ = std::make_pair(control->recipe_id, next->recipe_id);
            std::lock_guard lock(mutex_);
            exclusive_qualification_ = true;
            for (const auto& e : engines_.engines())
                if (e.role == driver::EngineRole::serving) {
                    endpoint_.switch_to(std::nullopt);
                    engines_.stop(e);
                }
        }
    }
    if (begin) {
        store_.transition(*begin);
        if (next->status == Status::failed) retry_backoff_.erase(next->id);
        next->status = Status::qualifying;
    }
    set_condition("Qualification", true, "Running", "qualifying " + next->recipe_id);
    runner_.run(std::move(job), [this] { wake(); });
}

void Reconciler::request_qualification(const std::string& recipe_id, const std::string& actor) {
    const auto detail = store_.recipe(recipe_id);
    if (!detail) throw RequestRefused(404, "not_found", "no recipe " + recipe_id);
    const auto& latest = detail->revisions.front();
    if (runner_.current() == latest.id) throw RequestRefused(409, "conflict", recipe_id + " is being qualified now");
    if (latest.status != Status::candidate && latest.status != Status::failed && latest.status != Status::validated)
        throw RequestRefused(409, "conflict", recipe_id + " is " + std::string(state::to_string(latest.status)) +
                                                  "; only a candidate, failed or validated revision can be qualified");
    if (const auto why = not_in_registry(latest))
        throw RequestRefused(409, "conflict", recipe_id + " revision " + std::to_string(latest.id) + " cannot be qualified: " + *why);
    try {
        store_.transition({latest.id, Status::qualifying, "qualification requested by " + actor, actor, {}, {}, std::nullopt});
    } catch (const state::TransitionRefused& e) {
        throw RequestRefused(409, "conflict", e.what());
    }
    wake();
}

// ---------------------------------------------------------------- promotion

qualify::Thresholds Reconciler::thresholds() const {
    qualify::Thresholds t;
    if (config_.requirements)
        for (const auto& [name, v] : config_.requirements->thresholds) {
            if (!v.value) continue;
            const double x = registry::to_double(*v.value);
            if (name == "min_deterministic_pass_rate") t.min_deterministic_pass_rate = x;
            else if (name == "max_relative_quality_loss") t.max_relative_quality_loss = x;
            else if (name == "min_warm_e2e_gain") t.min_warm_e2e_gain = x;
            else if (name == "min_tasks_per_hour_ratio") t.min_tasks_per_hour_ratio = x;
        }
    t.margin = config_.promotion.margin;
    return t;
}

qualify::Contender Reconciler::contender(const state::RevisionRow& revision) const {
    qualify::Contender c;
    c.revision_id = revision.id;
    c.recipe_id = revision.recipe_id;
    const auto detail = store_.recipe(revision.recipe_id);
    if (!detail) return c;
    // The newest local measurement of each metric for this revision.
    for (const auto& e : detail->evidence)
        if (e.revision_id == revision.id && e.evidence_class == state::EvidenceClass::local && e.min)
            c.metrics[e.metric] = registry::to_double(*e.min);
    std::map<std::string, bool> gates;
    for (const auto& v : detail->verdicts)
        if (v.revision_id == revision.id && v.gate != "feasibility") gates[v.gate] = v.result == state::GateResult::pass;
    c.hard_gates_passed = !gates.empty();
    for (const auto& g : state::default_hard_gates()) c.hard_gates_passed = c.hard_gates_passed && gates.count(g) && gates[g];
    return c;
}

void Reconciler::promote(const state::RevisionRow& revision, const std::string& reason, const std::string& actor) {
    const auto previous = store_.current_default(revision.serving_slot);
    const auto detail = store_.recipe(revision.recipe_id);
    std::vector<state::Id> evidence, verdicts;
    if (detail) {
        for (const auto& e : detail->evidence)
            if (e.revision_id == revision.id && e.evidence_class == state::EvidenceClass::local) evidence.push_back(e.id);
        for (const auto& v : detail->verdicts)
            if (v.revision_id == revision.id && v.gate != "feasibility") verdicts.push_back(v.id);
    }
    store_.promote(revision.id, reason, actor, evidence, verdicts);
    store_.set_setting(kLastPromotionKey,
                       {{"revision_id", revision.id}, {"recipe_id", revision.recipe_id}, {"at", state::now_iso8601()},
                        {"previous_revision_id", previous ? json(previous->id) : json(nullptr)}},
                       actor);
    spdlog::info("promoted {} revision {}: {}", revision.recipe_id, revision.id, reason);
    wake();
}

void Reconciler::promotion_step() {
    const auto pin = store_.setting(kPinKey);
    const auto current = store_.current_default();
    if (pin) {
        // A manual pin always wins: the API promoted it; nothing automatic happens while it holds.
        set_condition("Promotion", true, "Pinned", "pinned to " + pin->value("recipe_id", std::string()) + " by " + pin->value("actor", std::string()));
        return;
    }
    if (const auto freeze = store_.setting(kFreezeKey)) {
        set_condition("Promotion", true, "Frozen", "frozen by " + freeze->value("actor", std::string()) + ": " + freeze->value("reason", std::string()));
        return;
    }
    if (config_.promotion.policy == "manual") {
        set_condition("Promotion", true, "Manual", "the policy is manual: pin a recipe to change the default");
        return;
    }
    auto validated = store_.latest_revisions_with_status(Status::validated, 1000);
    // Only what is at the synced commit may become the default.
    std::erase_if(validated, [this](const state::RevisionRow& r) { return not_in_registry(r).has_value(); });
    if (validated.empty()) {
        set_condition("Promotion", true, "NothingToPromote", current ? "no validated candidate is waiting" : "no validated candidate yet");
        return;
    }
    const qualify::Thresholds t = thresholds();
    qualify::PolicyState policy;
    policy.policy = config_.promotion.policy;
    policy.min_interval = config_.promotion.min_interval;
    if (const auto last = store_.setting(kLastPromotionKey)) policy.last_promotion = parse_time(last->value("at", std::string()));

    std::vector<qualify::Contender> contenders;
    for (const auto& r : validated) contenders.push_back(contender(r));
    if (!current) {
        const auto best = qualify::best_of(contenders);
        if (!best) return;
        const auto it = std::find_if(validated.begin(), validated.end(), [&](const auto& r) { return r.id == best->revision_id; });
        std::string e2e = best->metrics.count("warm_e2e_seconds") ? std::to_string(best->metrics.at("warm_e2e_seconds")) + " s" : "unmeasured";
        promote(*it, "first default: the best validated candidate (warm e2e " + e2e + ")", "reconciler");
        return;
    }
    const qualify::Contender control = contender(*current);
    std::optional<std::pair<qualify::Contender, qualify::Decision>> winner;
    std::vector<std::string> holds;
    for (const auto& c : contenders) {
        qualify::Decision d;
        const auto measured_against = c.metrics.find("quality_control_revision");
        if (measured_against == c.metrics.end() || static_cast<state::Id>(measured_against->second) != current->id) {
            d.action = qualify::Action::hold;
            d.reason = "inconclusive: its quality was not measured against the current default (revision " + std::to_string(current->id) +
                       "); qualify it again to compare";
        } else {
            d = qualify::decide(c, control, t, policy);
        }
        note("decision:" + std::to_string(c.revision_id), c.recipe_id, std::string(qualify::to_string(d.action)) + ": " + d.reason);
        if (d.action == qualify::Action::promote) {
            const double e2e = c.metrics.count("warm_e2e_seconds") ? c.metrics.at("warm_e2e_seconds") : 1e300;
            const double best = winner && winner->first.metrics.count("warm_e2e_seconds") ? winner->first.metrics.at("warm_e2e_seconds") : 1e300;
            if (!winner || e2e < best) winner = std::make_pair(c, d);
        } else {
            holds.push_back(c.recipe_id + ": " + d.reason);
        }
    }
    if (winner) {
        // The rollback target must be able to start now, or the switch is not made. Checked only
        // when a switch is due: it hashes the model directory.
        if (auto current_doc = document_of(*current)) {
            if (auto why = engines_.startable(*current_doc->recipe())) {
                set_condition("Promotion", false, "RollbackUnavailable",
                              "the current default " + current->recipe_id + " could not be restarted for a rollback: " + *why);
                return;
            }
        }
        const auto it = std::find_if(validated.begin(), validated.end(), [&](const auto& r) { return r.id == winner->first.revision_id; });
        std::string checks;
        for (const auto& c : winner->second.checks) checks += (checks.empty() ? "" : "; ") + c;
        promote(*it, "beat the default " + current->recipe_id + " (revision " + std::to_string(current->id) + "): " + checks, "reconciler");
        return;
    }
    std::string message;
    for (const auto& h : holds) message += (message.empty() ? "" : " | ") + h;
    set_condition("Promotion", true, "Holding", message);
}

void Reconciler::rollback(const std::string& why) {
    const auto last = store_.setting(kLastPromotionKey);
    if (!last || !last->contains("previous_revision_id") || (*last)["previous_revision_id"].is_null()) {
        set_condition("DefaultServing", false, "NoRollbackTarget", why + "; there is no previous default to roll back to");
        return;
    }
    const state::Id previous_id = (*last)["previous_revision_id"].get<state::Id>();
    const auto previous = store_.revision(previous_id);
    if (!previous) return;
    if (const auto gone = not_in_registry(*previous)) {
        set_condition("DefaultServing", false, "NoRollbackTarget", why + "; the previous default " + previous->recipe_id + " cannot come back: it was " + *gone);
        return;
    }
    try {
        promote(*previous, "rollback: " + why, "reconciler");
        store_.append_event("rollback", previous->recipe_id, "rolled back to revision " + std::to_string(previous_id) + ": " + why);
        // A pin on what could not serve no longer holds: the operator is told by the freeze below.
        if (const auto pin = store_.setting(kPinKey); pin && pin->value("recipe_id", std::string()) != previous->recipe_id)
            store_.clear_setting(kPinKey, "reconciler");
        // Hold automatic promotion until someone looks: the same candidate would win again.
        store_.set_setting(kFreezeKey, {{"reason", "automatic rollback: " + why}, {"actor", "reconciler"}, {"at", state::now_iso8601()}}, "reconciler");
    } catch (const std::exception& e) {
        set_condition("DefaultServing", false, "RollbackFailed", why + "; rollback refused: " + e.what());
    }
}

// ---------------------------------------------------------------- serving

void Reconciler::serving_step() {
    {
        std::lock_guard lock(mutex_);
        if (exclusive_qualification_) return;
    }
    const auto current = store_.current_default();
    if (!current) {
        // The default was retired (removed from the registry) and nothing replaced it: stop
        // admitting, then stop what served it.
        if (endpoint_.current()) endpoint_.switch_to(std::nullopt);
        for (const auto& e : engines_.engines())
            if (e.role == driver::EngineRole::serving) engines_.stop(e);
        set_condition("DefaultServing", false, "NoDefault", "no recipe is promoted: the stable endpoint answers 503");
        return;
    }
    auto engine = engines_.serving_for(current->id);
    if (!engine) {
        auto& b = serving_backoff_[current->id];
        if (Clock::now() < b.next) return;
        auto doc = document_of(*current);
        if (!doc) return;
        try {
            engine = engines_.start(current->id, *doc->recipe(), driver::EngineRole::serving);
            b = {};
        } catch (const std::exception& e) {
            ++b.failures;
            b.next = Clock::now() + std::min<std::chrono::milliseconds>(std::chrono::seconds(60), std::chrono::seconds(1) * (1 << std::min(b.failures, 6)));
            const std::string why = "the default " + current->recipe_id + " could not start (" + std::to_string(b.failures) + " tries): " + e.what();
            set_condition("DefaultServing", false, "EngineFailed", why);
            store_.append_event("engine", current->recipe_id, why);
            const auto last = store_.setting(kLastPromotionKey);
            const bool recent = last && last->value("revision_id", state::Id{0}) == current->id &&
                                std::chrono::system_clock::now() - parse_time(last->value("at", std::string())) < kProbation;
            if (recent && b.failures >= kRollbackAfterFailures) rollback(why);
            return;
        }
    }
    const auto upstream = endpoint_.current();
    if (!upstream || upstream->engine_id != engine->handle.engine_id) {
        endpoint::Upstream next;
        next.host = engine->handle.host;
        next.port = engine->handle.port;
        next.model = engine->handle.served_model_name;
        next.engine_id = engine->handle.engine_id;
        next.recipe_id = current->recipe_id;
        next.api_key = engine->handle.api_key;
        const auto result = endpoint_.switch_to(next);
        store_.append_event("endpoint", current->recipe_id,
                            "the stable endpoint now forwards to engine " + engine->handle.engine_id + " (drained " +
                                std::to_string(result.drained) + " requests, " + std::to_string(result.still_running) + " still running)");
        // After the switch the new default must still answer as promised; if not, roll back.
        if (!driver::models_list(next.host, next.port, next.model, std::chrono::seconds(5), next.api_key)) {
            rollback("the new default " + current->recipe_id + " stopped answering /v1/models after the switch");
            return;
        }
    }
    set_condition("DefaultServing", true, "Serving", current->recipe_id + " on engine " + engine->handle.engine_id);
    // Serving engines of anything else go, now that nothing is admitted to them.
    for (const auto& e : engines_.engines())
        if (e.role == driver::EngineRole::serving && e.revision_id != current->id) engines_.stop(e);
}

// ---------------------------------------------------------------- operator requests

void Reconciler::request_sync() {
    {
        std::lock_guard lock(mutex_);
        force_sync_ = true;
    }
    wake();
}

void Reconciler::pin(const std::optional<std::string>& recipe_id, const std::string& actor) {
    if (!recipe_id) {
        if (!store_.setting(kPinKey)) throw RequestRefused(409, "conflict", "no recipe is pinned");
        store_.clear_setting(kPinKey, actor);
        wake();
        return;
    }
    const auto detail = store_.recipe(*recipe_id);
    if (!detail) throw RequestRefused(404, "not_found", "no recipe " + *recipe_id);
    // The newest revision that has been validated: a pin never serves unqualified weights, nor a
    // revision whose document is not at the synced commit of the registry.
    std::optional<state::RevisionRow> target;
    std::optional<std::string> absent;
    for (const auto& r : detail->revisions)
        if (r.status == Status::validated || r.status == Status::promoted || r.status == Status::retired) {
            if (auto why = not_in_registry(r)) {
                if (!absent) absent = "revision " + std::to_string(r.id) + " is " + *why;
                continue;
            }
            target = r;
            break;
        }
    if (!target || target->status == Status::retired) {
        bool ever_validated = false;
        for (const auto& t : detail->history)
            if (target && t.revision_id == target->id && t.to == Status::validated) ever_validated = true;
        if (!ever_validated)
            throw RequestRefused(409, "conflict", *recipe_id + " has no validated revision in the registry to pin" + (absent ? " (" + *absent + ")" : std::string()));
    }
    if (target->status != Status::promoted) {
        try {
            promote(*target, "pinned as the default by " + actor, actor);
        } catch (const state::TransitionRefused& e) {
            throw RequestRefused(409, "conflict", e.what());
        }
    }
    store_.set_setting(kPinKey, {{"recipe_id", *recipe_id}, {"revision_id", target->id}, {"actor", actor}, {"at", state::now_iso8601()}}, actor);
    wake();
}

void Reconciler::freeze(const std::string& reason, const std::string& actor) {
    store_.set_setting(kFreezeKey, {{"reason", reason.empty() ? std::string("frozen through the API") : reason}, {"actor", actor}, {"at", state::now_iso8601()}},
                       actor);
    wake();
}

void Reconciler::unfreeze(const std::string& actor) {
    if (!store_.setting(kFreezeKey)) throw RequestRefused(409, "conflict", "promotion is not frozen");
    store_.clear_setting(kFreezeKey, actor);
    wake();
}

// ---------------------------------------------------------------- reads for the API

bool Reconciler::ready() const { return not_ready_reasons().empty(); }

std::vector<std::string> Reconciler::not_ready_reasons() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& w : watches_)
        if (!w->read_once()) out.push_back("source " + w->config().name + " not read yet" + (w->last_error() ? ": " + *w->last_error() : ""));
    if (!first_pass_done_) out.push_back("first reconcile pass");
    return out;
}

void Reconciler::set_condition(const std::string& type, bool ok, const std::string& reason, const std::string& message) {
    std::lock_guard lock(mutex_);  // the API reads conditions from its own threads
    auto& c = conditions_[type];
    if (c.ok != ok || c.reason != reason || c.since.empty()) c.since = state::now_iso8601();
    c.ok = ok;
    c.reason = reason;
    c.message = message;
}

void Reconciler::note(const std::string& key, const std::string& subject, const std::string& message) {
    auto& last = last_notes_[key];
    if (last == message) return;
    last = message;
    store_.append_event("decision", subject, message);
}

json Reconciler::status() const {
    json out;
    const auto current = store_.current_default();
    out["default"] = current ? json{{"recipe_id", current->recipe_id}, {"revision_id", current->id}} : json(nullptr);
    const auto pin = store_.setting(kPinKey);
    const auto freeze = store_.setting(kFreezeKey);
    out["policy"] = {{"mode", config_.promotion.policy}, {"frozen", freeze.has_value()}, {"freeze", freeze.value_or(json(nullptr))},
                     {"pinned", pin ? json((*pin)["recipe_id"]) : json(nullptr)}};
    json counts = json::object();
    for (Status s : {Status::candidate, Status::qualifying, Status::validated, Status::promoted, Status::retired, Status::rejected, Status::failed}) {
        state::RecipeFilter f;
        f.status = std::string(state::to_string(s));
        f.limit = 0;
        counts[std::string(state::to_string(s))] = store_.list_recipes(f).total;
    }
    out["recipes"] = counts;
    out["engines"] = engines_.engines().size();
    out["qualifying"] = runner_.current() ? json(*runner_.current()) : json(nullptr);
    const auto upstream = endpoint_.current();
    out["endpoint"] = {{"address", config_.serve.str()},
                       {"upstream", upstream ? json{{"engine_id", upstream->engine_id}, {"recipe_id", upstream->recipe_id}, {"port", upstream->port}} : json(nullptr)}};
    std::lock_guard lock(mutex_);
    out["conditions"] = json::array();
    for (const auto& [type, c] : conditions_)
        out["conditions"].push_back({{"type", type}, {"status", c.ok ? "True" : "False"}, {"reason", c.reason}, {"message", c.message}, {"since", c.since}});
    out["last_pass"] = last_pass_;
    out["inventory"] = {{"source", inventory_note_}, {"gpus", inventory_ ? inventory_->gpus.size() : 0}};
    return out;
}

json Reconciler::last_pass() const {
    std::lock_guard lock(mutex_);
    return last_pass_;
}

json Reconciler::registry_status() const {
    std::lock_guard lock(mutex_);
    json out = json::array();
    for (const auto& w : watches_) {
        json invalid = json::array();
        std::size_t documents = 0;
        for (const auto& [path, doc] : w->catalog().documents()) {
            ++documents;
            if (!w->catalog().usable(doc)) invalid.push_back({{"path", path}, {"problems", w->catalog().problems(doc)}});
        }
        out.push_back({{"name", w->config().name}, {"url", w->config().url}, {"ref", w->config().ref},
                       {"commit", w->catalog().commit()}, {"last_sync", w->last_sync_at()},
                       {"last_error", w->last_error() ? json(*w->last_error()) : json(nullptr)}, {"documents", documents}, {"invalid", invalid}});
    }
    return out;
}

std::optional<json> Reconciler::feasibility_of(const std::string& recipe_id) const {
    std::lock_guard lock(mutex_);
    for (const auto& w : watches_) {
        const auto* doc = w->catalog().find(registry::DocumentKind::recipe, recipe_id);
        if (!doc || !doc->recipe()) continue;
        auto a = registry::assess_recipe(*doc->recipe(), doc->pins, registry::models_of(*doc), gate_context(*doc->recipe()));
        json out = a.to_json();
        out["source"] = w->config().name;
        out["commit"] = w->catalog().commit();
        out["inventory"] = inventory_note_;
        return out;
    }
    return std::nullopt;
}

}  // namespace anvil::daemon
