// The pass's registry step. In: each configured source that is due (or a requested sync).
// Out: the source's catalog swapped in, its new revisions in the ledger and judged on paper, and
// the RegistryReachable condition. Then the retire step: revisions superseded or no longer in the
// registry leave the running (retired; a qualifying one withdrawn first).
#include "daemon/controller/reconciler.hpp"

#include <spdlog/spdlog.h>

namespace anvil::daemon {

using state::Status;

void Reconciler::registry_step() {
    const auto now = clock_->steady();
    bool force = false;
    {
        std::lock_guard lock(mutex_);
        force = std::exchange(force_sync_, false);
    }
    for (auto& watch : watches_) {
        // What a source brought that the ledger could not take (a full disk): ingested again
        // before the source is read any further, so that no revision of that commit is lost. Its
        // documents stay where they are: the watch is not polled meanwhile.
        if (auto pending = memory_.pending_ingest.find(watch->config().name); pending != memory_.pending_ingest.end()) {
            ingest(*watch, pending->second, memory_.source_ids.at(watch->config().name));  // throws again while the ledger refuses
            memory_.pending_ingest.erase(pending);
            continue;
        }
        if (!force && !watch->due(now)) continue;
        const auto polled = std::chrono::steady_clock::now();
        // The fetch runs without mutex_ (a slow remote must not stall /readyz or /status); the
        // watch takes it only to swap in what it read.
        const WatchResult result = watch->poll(mutex_, now, now_text());
        sources_read_ = true;
        if (result.changed) sources_changed_ = true;
        step_detail_["registry_poll_ms"] = ms_since(polled);
        std::optional<std::string> error;
        std::string commit;
        {
            std::lock_guard lock(mutex_);
            error = watch->last_error();
            commit = watch->catalog().commit();
        }
        if (error) set_condition("RegistryReachable:" + watch->config().name, false, "FetchFailed", *error);
        else set_condition("RegistryReachable:" + watch->config().name, true, "Synced", commit.empty() ? "read from the filesystem" : "at commit " + commit);
        if (result.changed) {
            const auto t = std::chrono::steady_clock::now();
            try {
                ingest(*watch, result, memory_.source_ids.at(watch->config().name));
            } catch (...) {
                // Whatever stopped it (a full disk, or anything else), the catalog has moved on and
                // the next poll would say "unchanged": the change is kept and ingested again first.
                memory_.pending_ingest.emplace(watch->config().name, result);
                throw;
            }
            step_detail_["registry_ingest_ms"] = ms_since(t);
        }
    }
}

void Reconciler::ingest(RegistryWatch& watch, const WatchResult& result, state::Id source_id) {
    // Each piece timed on its own: most of an incremental pass is spent here, in commits.
    auto timed = [this](const char* name, auto&& work) {
        const auto t = std::chrono::steady_clock::now();
        work();
        step_detail_[name] = ms_since(t);
    };
    // The commit read and the revisions it brought: one transaction, one fsync.
    std::vector<state::Store::Ingested> ingested;
    timed("ingest_revisions_ms", [&] {
        const bool record = source_id > 0 && watch.is_git();
        if (record || !result.changed_recipes.empty())
            ingested = store_.ingest_revisions(source_id, result.changed_recipes, "reconciler", record ? &result.report : nullptr);
    });
    // What the retire step looks at again: what this read touched, or everything after a full
    // read. Only now that the ledger holds the commit's revisions: retiring against them earlier
    // would retire the heads they replace.
    if (result.report.mode == registry::SyncReport::Mode::full) memory_.retire_scope.all = true;
    memory_.retire_scope.recipes.insert(result.touched_recipe_ids.begin(), result.touched_recipe_ids.end());
    memory_.retire_scope.recipes.insert(result.removed_recipe_ids.begin(), result.removed_recipe_ids.end());
    std::vector<std::pair<state::Id, const registry::Document*>> created;
    for (std::size_t i = 0; i < ingested.size(); ++i)
        if (ingested[i].created) created.emplace_back(ingested[i].revision_id, result.changed_recipes[i]);
    timed("ingest_judge_ms", [&] { judge(created); });
    // Recipes gone from the registry are retired by the retire step, which runs next. (Only this
    // thread swaps catalogs, so reading the watch's here needs no lock.)
    const std::string& commit = watch.catalog().commit();
    spdlog::info("registry {}: {} {} ({} recipe documents changed, {} new revisions, {} recipes removed)", watch.config().name,
                 registry::to_string(result.report.mode), commit.empty() ? "directory" : commit.substr(0, 12),
                 result.changed_recipes.size(), created.size(), result.removed_recipe_ids.size());
    if (!created.empty() || !result.removed_recipe_ids.empty())
        store_.append_event("registry", watch.config().name,
                            std::to_string(created.size()) + " new revisions, " + std::to_string(result.removed_recipe_ids.size()) + " recipes removed",
                            {{"commit", commit}, {"mode", std::string(registry::to_string(result.report.mode))}});
}

void Reconciler::retire_step() {
    // Until every source has been read, absence proves nothing: retire nothing.
    for (const auto& watch : watches_)
        if (!watch->read_once()) return;
    if (!memory_.retire_scope.all && memory_.retire_scope.recipes.empty()) return;
    const auto running = qualifications_->current();
    std::vector<state::TransitionRequest> retire;
    // Recipes to look at again at the next pass: one whose revision is being withdrawn.
    PassMemory::RetireScope next{false, {}};
    // A revision under qualification is withdrawn first (its engine stops); it is retired at the
    // pass after the runner lets it go, so the runner and the pass never record it both.
    auto withdraw_or_retire = [&](state::Id id, const std::string& recipe_id, Status status, const std::string& reason,
                                  std::optional<std::string> commit) {
        if (status == Status::qualifying && running == id) {
            qualifications_->withdraw(id, reason);
            next.recipes.insert(recipe_id);
            return;
        }
        retire.push_back({id, Status::retired, reason, "reconciler", {}, {}, std::move(commit)});
    };
    // Superseded revisions appear only where a new revision came in, which a commit touched: the
    // query is indexed and returns few rows, so it runs whole. A full page leaves more for later.
    constexpr int kSupersededPage = 1000;
    const auto superseded = store_.superseded_open_revisions(kSupersededPage);
    if (superseded.size() >= static_cast<std::size_t>(kSupersededPage)) next.all = true;
    for (const auto& r : superseded)
        withdraw_or_retire(r.revision_id, r.recipe_id, r.status, "superseded by revision " + std::to_string(r.newest_revision_id),
                           std::nullopt);
    const auto heads = memory_.retire_scope.all ? store_.latest_revision_heads() : store_.latest_revision_heads(memory_.retire_scope.recipes);
    step_detail_["retire_heads"] = heads.size();
    for (const auto& head : heads) {
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
        withdraw_or_retire(head.revision_id, head.recipe_id, head.status, *why, commit);
    }
    for (const auto& r : retire) spdlog::info("retiring revision {}: {}", r.revision_id, r.reason);
    record_transitions(retire);  // throws while the ledger refuses: the scope stays for the next pass
    memory_.retire_scope = std::move(next);
}

}  // namespace anvil::daemon
