// The store's transitions: the guard's facts gathered in the writer's transaction, the ledger row with
// its status cache and recipe summary, batches, and promotion with the old default's retirement.
#include "state/store_impl.hpp"

#include <sqlite3.h>

namespace anvil::state {

using nlohmann::json;
using namespace store_detail;

Id Store::Impl::insert_transition(Id revision_id, const std::string& recipe_id, const std::string& slot, std::optional<Status> from,
                                   const TransitionRequest& r, const std::string& now) {
    // bind_static: every string bound here (request, caller's locals, status names, `now`,
    // the id lists below) outlives the statement's run.
    auto& insert = hot_statement(hot.insert_transition,
                                 "INSERT INTO transitions (revision_id, from_status, to_status, reason, evidence_ids, verdict_ids, "
                                 "commit_id, actor, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
    const std::string evidence = ids_json(r.evidence_ids), verdicts = ids_json(r.verdict_ids);
    const std::string_view to = to_string(r.to);
    insert.bind(1, revision_id);
    if (from) insert.bind_static(2, to_string(*from));
    else insert.bind_null(2);
    insert.bind_static(3, to).bind_static(4, r.reason).bind_static(5, evidence).bind_static(6, verdicts);
    if (r.commit_id) insert.bind_static(7, *r.commit_id);
    else insert.bind_null(7);
    insert.bind_static(8, r.actor).bind_static(9, now);
    insert.run();
    const Id transition_id = writer->conn.last_insert_id();

    auto& status = from ? hot_statement(hot.update_status, "UPDATE revision_status SET status = ?2, last_transition_id = ?3 WHERE revision_id = ?1")
                        : hot_statement(hot.insert_status,
                                        "INSERT INTO revision_status (revision_id, status, last_transition_id, serving_slot) VALUES (?1, ?2, ?3, ?4)");
    status.bind(1, revision_id).bind_static(2, to).bind(3, transition_id);
    if (!from) status.bind_static(4, slot);
    try {
        status.run();
    } catch (const StoreError& e) {
        if (e.sqlite_code == SQLITE_CONSTRAINT)
            throw TransitionRefused("slot guard: serving slot '" + slot + "' already has a promoted revision; promote() retires it in the same transaction");
        throw;
    }
    auto& summary = hot_statement(hot.update_summary, "UPDATE recipes SET status = ?3 WHERE id = ?1 AND latest_revision_id = ?2");
    summary.bind_static(1, recipe_id).bind(2, revision_id).bind_static(3, to);
    summary.run();
    return transition_id;
}

std::set<std::string> Store::Impl::gates_passed_locally(Id revision_id) {
    std::set<std::string> passed;
    auto& verdicts = w("SELECT gate, evidence_ids FROM verdicts WHERE revision_id = ? AND result = 'pass'");
    verdicts.bind(1, revision_id);
    std::vector<std::pair<std::string, std::vector<Id>>> rows;
    while (verdicts.step()) rows.emplace_back(verdicts.text(0), parse_ids(verdicts.text(1)));
    verdicts.reset();
    for (const auto& [gate, evidence] : rows) {
        if (evidence.empty()) continue;
        bool all_local = true;
        for (Id e : evidence) {
            auto& check = w("SELECT class FROM evidence WHERE id = ? AND revision_id = ?");
            check.bind(1, e).bind(2, revision_id);
            all_local = all_local && check.step() && check.text(0) == "local";
            check.reset();
        }
        if (all_local) passed.insert(gate);
    }
    return passed;
}

Id Store::Impl::guarded_transition(const TransitionRequest& r, const std::string& now) {
    auto& rev = hot_statement(hot.select_revision,
                              "SELECT r.pinned, r.unpinned_reasons, s.status, r.recipe_id, r.serving_slot FROM recipe_revisions r "
                              "LEFT JOIN revision_status s ON s.revision_id = r.id WHERE r.id = ?");
    rev.bind(1, r.revision_id);
    if (!rev.step()) throw TransitionRefused("revision guard: revision " + std::to_string(r.revision_id) + " does not exist");
    TransitionFacts facts;
    facts.pinned = rev.integer(0) == 1;
    if (const std::string_view reasons = rev.text_view(1); reasons != "[]") facts.unpinned_reasons = parse_strings(std::string(reasons));
    if (!rev.is_null(2)) facts.from = status_from(rev.text(2));
    const std::string recipe_id = rev.text(3), slot = rev.text(4);
    rev.reset();
    facts.to = r.to;
    facts.reason = r.reason;
    facts.actor = r.actor;
    if (r.to == Status::validated || r.to == Status::promoted) {  // the only moves the evidence guard reads these for
        facts.required_hard_gates = options.hard_gates;
        facts.hard_gates_passed_locally = gates_passed_locally(r.revision_id);
    }
    if (auto refusal = refuse_transition(facts))
        throw TransitionRefused("revision " + std::to_string(r.revision_id) + ": " + *refusal);
    return insert_transition(r.revision_id, recipe_id, slot, facts.from, r, now);
}

Id Store::transition(const TransitionRequest& request) { return transition_batch({request}).front(); }

std::vector<Id> Store::transition_batch(const std::vector<TransitionRequest>& requests) {
    return write("transitions", [&] {
        std::vector<Id> ids;
        ids.reserve(requests.size());
        const std::string now = impl_->now();
        for (const auto& r : requests) ids.push_back(impl_->guarded_transition(r, now));
        return ids;
    });
}

Store::Promotion Store::promote(Id revision_id, const std::string& reason, const std::string& actor,
                                const std::vector<Id>& evidence_ids, const std::vector<Id>& verdict_ids) {
    return write("a promotion", [&] {
        Promotion out;
        const std::string now = impl_->now();
        auto& current = impl_->w("SELECT s.revision_id FROM revision_status s JOIN recipe_revisions r ON r.id = ?1 "
                                 "WHERE s.serving_slot = r.serving_slot AND s.status = 'promoted' AND s.revision_id != ?1");
        current.bind(1, revision_id);
        if (current.step()) out.retired_revision = current.integer(0);
        current.reset();
        if (out.retired_revision) {
            TransitionRequest retire{*out.retired_revision, Status::retired, "superseded by revision " + std::to_string(revision_id) + ": " + reason,
                                     actor, evidence_ids, verdict_ids, std::nullopt};
            out.retired_transition = impl_->guarded_transition(retire, now);
        }
        out.promoted_transition =
            impl_->guarded_transition({revision_id, Status::promoted, reason, actor, evidence_ids, verdict_ids, std::nullopt}, now);
        return out;
    });
}

}  // namespace anvil::state
