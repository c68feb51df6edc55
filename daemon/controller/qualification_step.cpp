// The pass's qualification step. In: revisions `qualifying` (asked for, or cut short
// by a restart), `failed` ones whose backoff ran out, and the most faithful `candidate`; the
// current default (the control) and the inventory. Out: at most one qualification started, the
// default paused first when the two cannot run side by side (only inside the exclusive window),
// and the Qualification condition. The pause's drain and engine stop run without mutex_.
#include "daemon/controller/reconciler.hpp"

#include "daemon/controller/revision_document.hpp"
#include "daemon/qualify/controller_rules.hpp"

namespace anvil::daemon {

using state::Status;

void Reconciler::qualification_step() {
    if (qualifications_->busy()) return;
    if (memory_.exclusive_qualification) {
        memory_.exclusive_qualification = false;  // the serving step brings the default back
        wake();
    }
    if (memory_.resume_after_exclusive) {
        store_.append_event("qualification", memory_.resume_after_exclusive->first,
                            "exclusive qualification of " + memory_.resume_after_exclusive->second + " over: the default serves again");
        memory_.resume_after_exclusive.reset();
    }
    const auto now = clock_->steady();
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
            auto& b = memory_.retry_backoff[r.id];
            if (b.failures == 0) {
                const auto detail = store_.recipe(r.recipe_id);
                for (const auto& t : detail ? detail->history : std::vector<state::TransitionRow>{})
                    if (t.revision_id == r.id && t.to == Status::failed) ++b.failures;
                b.next = now + qualify::Backoff{config_.promotion.retry_backoff_min, config_.promotion.retry_backoff_max}.after(b.failures);
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
            auto rank = memory_.fidelity_ranks.find(id);
            std::optional<state::RevisionRow> row;
            if (rank == memory_.fidelity_ranks.end()) {
                row = store_.revision(id);
                auto doc = row ? document_of(*row) : std::nullopt;
                rank = memory_.fidelity_ranks.emplace(id, doc ? fidelity_rank(*doc->recipe()) : 99).first;
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
    const auto control = store_.current_default();
    if (control) job.control_revision = control->id;

    // Two engines that cannot run side by side: qualify only inside the exclusive window, with the
    // default paused; the serving step restores it afterwards whatever the outcome.
    if (control && inventory_) {
        auto control_doc = document_of(*control);
        if (control_doc && !job.recipe.runs_on_cpu() && !control_doc->recipe()->runs_on_cpu() &&
            job.recipe.hardware_count + control_doc->recipe()->hardware_count > static_cast<std::int64_t>(inventory_->gpus.size())) {
            const auto& window = config_.promotion.exclusive_window;
            if (!window || !window->contains(clock_->local_minute_of_day())) {
                set_condition("Qualification", false, "OutsideExclusiveWindow",
                              next->recipe_id + " and the default cannot run together; qualification waits for the window " +
                                  (window ? window->str() : std::string("(none configured)")));
                return;
            }
            store_.append_event("qualification", control->recipe_id,
                                "paused inside the exclusive window " + window->str() + " to qualify " + next->recipe_id +
                                    ": the two need " + std::to_string(job.recipe.hardware_count + control_doc->recipe()->hardware_count) +
                                    " GPUs, the inventory has " + std::to_string(inventory_->gpus.size()));
            memory_.resume_after_exclusive = std::make_pair(control->recipe_id, next->recipe_id);
            memory_.exclusive_qualification = true;
            // The drain (up to the endpoint's drain timeout) and the stop run without mutex_.
            for (const auto& e : engines_->engines())
                if (e.role == drivers::EngineRole::serving) {
                    endpoint_->switch_to(std::nullopt);
                    engines_->stop(e);
                }
        }
    }
    if (begin) {
        store_.transition(*begin);
        if (next->status == Status::failed) memory_.retry_backoff.erase(next->id);
        next->status = Status::qualifying;
    }
    set_condition("Qualification", true, "Running", "qualifying " + next->recipe_id);
    qualifications_->run(std::move(job), [this] { wake(); });
}

}  // namespace anvil::daemon
