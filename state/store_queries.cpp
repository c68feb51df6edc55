// The store's read queries: recipe listings and detail, revisions by status, the default, statuses
// and the same statuses rebuilt from the ledger. Each borrows a pooled reader connection.
#include "state/store_impl.hpp"
#include "support/text.hpp"

#include <algorithm>

namespace anvil::state {

using nlohmann::json;
using namespace store_detail;

namespace {

constexpr const char* kRevisionColumns =
    "SELECT r.id, r.recipe_id, r.sha256, src.url, r.commit_id, r.path, r.blob_id, r.engine, r.hardware_id, r.launch_kind, "
    "r.serving_slot, r.pinned, r.unpinned_reasons, s.status, r.created_at, r.document FROM recipe_revisions r "
    "JOIN revision_status s ON s.revision_id = r.id LEFT JOIN sources src ON src.id = r.source_id ";

// Columns: kRevisionColumns.
RevisionRow read_revision(Statement& s) {
    RevisionRow row;
    row.id = s.integer(0);
    row.recipe_id = s.text(1);
    row.sha256 = s.text(2);
    row.source_url = s.optional_text(3).value_or("");
    row.commit_id = s.text(4);
    row.path = s.text(5);
    row.blob_id = s.text(6);
    row.engine = s.text(7);
    row.hardware_id = s.text(8);
    row.launch_kind = s.text(9);
    row.serving_slot = s.text(10);
    row.pinned = s.integer(11) == 1;
    row.unpinned_reasons = parse_strings(s.text(12));
    row.status = status_from(s.text(13));
    row.created_at = s.text(14);
    row.document = json::parse(s.text(15));
    return row;
}

}  // namespace

std::map<Status, std::int64_t> Store::recipes_by_status() const {
    std::map<Status, std::int64_t> out;
    for (Status s : {Status::candidate, Status::qualifying, Status::validated, Status::promoted, Status::retired, Status::rejected, Status::failed})
        out[s] = 0;
    auto r = impl_->reader();
    auto& s = r.prepare("SELECT status, count(*) FROM recipes GROUP BY status");
    while (s.step()) out[status_from(s.text(0))] = s.integer(1);
    s.reset();
    return out;
}

RecipePage Store::list_recipes(const RecipeFilter& f) const {
    // Every recipes row gets its latest revision in the transaction that creates it, so no filter
    // on it is needed; one would cost a table lookup per row the status index already counted.
    std::string where = " WHERE 1";
    std::vector<SqlValue> params;
    auto add = [&](const char* clause, SqlValue v) {
        where += clause;
        params.push_back(std::move(v));
    };
    if (f.status) add(" AND status = ?", *f.status);
    if (f.engine) add(" AND engine = ?", *f.engine);
    if (f.hardware) add(" AND hardware_id = ?", *f.hardware);
    if (f.pinned) add(" AND pinned = ?", static_cast<std::int64_t>(*f.pinned ? 1 : 0));
    if (f.verdict) add(" AND verdict = ?", *f.verdict);
    if (f.text) {
        // GLOB rather than LIKE … ESCAPE: the trigram index serves GLOB, and LIKE only without
        // ESCAPE. Metacharacters in the term are bracketed so the text is matched literally.
        std::string term;
        for (char c : support::ascii_lower(*f.text)) {
            if (c == '*' || c == '?' || c == '[') term += std::string("[") + c + "]";
            else term += c;
        }
        add(" AND rowid IN (SELECT rowid FROM recipe_search WHERE search_text GLOB ?)", "*" + term + "*");
    }

    auto r = impl_->reader();
    RecipePage page;
    auto& count = r.prepare("SELECT count(*) FROM recipes" + where);
    for (std::size_t i = 0; i < params.size(); ++i) count.bind(static_cast<int>(i + 1), params[i]);
    count.step();
    page.total = count.integer(0);
    count.reset();

    // The column comes from this fixed table, never from the request.
    const char* column = "id";
    switch (f.order) {
    case RecipeOrder::id: column = "id"; break;
    case RecipeOrder::status: column = "status"; break;
    case RecipeOrder::engine: column = "engine"; break;
    case RecipeOrder::hardware: column = "hardware_id"; break;
    case RecipeOrder::verdict: column = "verdict"; break;
    }
    const std::string direction = f.descending ? " DESC" : "";
    std::string order = std::string(" ORDER BY ") + column + direction;
    if (f.order != RecipeOrder::id) order += ", id" + direction;
    auto& list = r.prepare("SELECT id, latest_revision_id, status, engine, hardware_id, pinned, verdict FROM recipes" + where + order +
                           " LIMIT ? OFFSET ?");
    int index = 1;
    for (const auto& p : params) list.bind(index++, p);
    list.bind(index, std::clamp<std::int64_t>(f.limit, 0, 1000));
    list.bind(index + 1, std::max<std::int64_t>(f.offset, 0));
    while (list.step()) {
        page.items.push_back({list.text(0), list.integer(1), list.text(2), list.text(3), list.text(4), list.integer(5) == 1,
                              list.optional_text(6)});
    }
    list.reset();
    return page;
}

std::optional<RevisionRow> Store::revision(Id revision_id) const {
    auto r = impl_->reader();
    auto& s = r.prepare(std::string(kRevisionColumns) + "WHERE r.id = ?");
    s.bind(1, revision_id);
    std::optional<RevisionRow> out;
    if (s.step()) out = read_revision(s);
    s.reset();
    return out;
}

std::optional<RecipeDetail> Store::recipe(const std::string& id) const {
    auto r = impl_->reader();
    RecipeDetail detail;
    detail.id = id;
    // Newest first, and the newest is the registry's (recipes.latest_revision_id): bytes the registry
    // went back to come before a later revision it no longer holds.
    auto& revisions = r.prepare(std::string(kRevisionColumns) +
                                "JOIN recipes rc ON rc.id = r.recipe_id WHERE r.recipe_id = ? ORDER BY (r.id = rc.latest_revision_id) DESC, r.id DESC");
    revisions.bind(1, id);
    while (revisions.step()) detail.revisions.push_back(read_revision(revisions));
    revisions.reset();
    if (detail.revisions.empty()) return std::nullopt;

    auto& evidence = r.prepare("SELECT e.id, e.revision_id, e.metric, e.value_min, e.value_max, e.unit, e.status, e.class, e.source, "
                               "e.observed_at, e.receipt_sha256, e.receipt_path, e.created_at, e.control_revision_id FROM evidence e "
                               "JOIN recipe_revisions r ON r.id = e.revision_id WHERE r.recipe_id = ? ORDER BY e.id");
    evidence.bind(1, id);
    while (evidence.step()) {
        EvidenceRow e;
        e.id = evidence.integer(0);
        e.revision_id = evidence.integer(1);
        e.metric = evidence.text(2);
        e.min = to_number(evidence.value(3));
        e.max = to_number(evidence.value(4));
        e.unit = evidence.text(5);
        e.status = registry::parse_evidence_status(evidence.text(6)).value_or(registry::EvidenceStatus::unknown);
        e.evidence_class = evidence.text(7) == "local" ? EvidenceClass::local : EvidenceClass::external_prior;
        e.source = evidence.text(8);
        e.observed_at = evidence.text(9);
        e.receipt_sha256 = evidence.optional_text(10);
        e.receipt_path = evidence.optional_text(11);
        e.created_at = evidence.text(12);
        if (!evidence.is_null(13)) e.control_revision_id = evidence.integer(13);
        detail.evidence.push_back(std::move(e));
    }
    evidence.reset();

    auto& verdicts = r.prepare("SELECT v.id, v.revision_id, v.gate, v.result, v.class, v.reasons, v.evidence_ids, v.created_at "
                               "FROM verdicts v JOIN recipe_revisions r ON r.id = v.revision_id WHERE r.recipe_id = ? ORDER BY v.id");
    verdicts.bind(1, id);
    while (verdicts.step()) {
        VerdictRow v;
        v.id = verdicts.integer(0);
        v.revision_id = verdicts.integer(1);
        v.gate = verdicts.text(2);
        const std::string result = verdicts.text(3);
        v.result = result == "pass" ? GateResult::pass : result == "fail" ? GateResult::fail : GateResult::unknown;
        v.verdict_class = verdicts.optional_text(4);
        v.reasons = parse_strings(verdicts.text(5));
        v.evidence_ids = parse_ids(verdicts.text(6));
        v.created_at = verdicts.text(7);
        detail.verdicts.push_back(std::move(v));
    }
    verdicts.reset();

    auto& history = r.prepare("SELECT t.id, t.revision_id, t.from_status, t.to_status, t.reason, t.evidence_ids, t.verdict_ids, "
                              "t.commit_id, t.actor, t.created_at FROM transitions t JOIN recipe_revisions r ON r.id = t.revision_id "
                              "WHERE r.recipe_id = ? ORDER BY t.id");
    history.bind(1, id);
    while (history.step()) detail.history.push_back(read_transition(history));
    history.reset();
    return detail;
}

std::optional<RevisionRow> Store::current_default(const std::string& slot) const {
    auto r = impl_->reader();
    auto& s = r.prepare(std::string(kRevisionColumns) + "WHERE s.status = 'promoted' AND s.serving_slot = ?");
    s.bind(1, slot);
    std::optional<RevisionRow> out;
    if (s.step()) out = read_revision(s);
    s.reset();
    return out;
}

std::optional<Status> Store::status_of(Id revision_id) const {
    auto r = impl_->reader();
    auto& s = r.prepare("SELECT status FROM revision_status WHERE revision_id = ?");
    s.bind(1, revision_id);
    std::optional<Status> out;
    if (s.step()) out = status_from(s.text(0));
    s.reset();
    return out;
}

std::map<Id, Status> Store::statuses() const {
    auto r = impl_->reader();
    auto& s = r.prepare("SELECT revision_id, status FROM revision_status");
    std::map<Id, Status> out;
    while (s.step()) out[s.integer(0)] = status_from(s.text(1));
    s.reset();
    return out;
}

std::map<Id, Status> Store::statuses_from_ledger() const {
    auto r = impl_->reader();
    // The last transition of each revision, by ledger order, is its status.
    auto& s = r.prepare("SELECT t.revision_id, t.to_status FROM transitions t "
                        "JOIN (SELECT revision_id, max(id) AS last FROM transitions GROUP BY revision_id) m ON m.last = t.id");
    std::map<Id, Status> out;
    while (s.step()) out[s.integer(0)] = status_from(s.text(1));
    s.reset();
    return out;
}

std::vector<RevisionRow> Store::latest_revisions_with_status(Status status, int limit) const {
    auto r = impl_->reader();
    // recipes.status mirrors the newest revision's status, and is indexed.
    auto& s = r.prepare(std::string(kRevisionColumns) +
                        "JOIN recipes rc ON rc.latest_revision_id = r.id WHERE rc.status = ? ORDER BY rc.id LIMIT ?");
    s.bind(1, std::string(to_string(status))).bind(2, static_cast<std::int64_t>(limit));
    std::vector<RevisionRow> out;
    while (s.step()) out.push_back(read_revision(s));
    s.reset();
    return out;
}

std::vector<Id> Store::latest_revision_ids_with_status(Status status, int limit) const {
    auto r = impl_->reader();
    auto& s = r.prepare("SELECT latest_revision_id FROM recipes WHERE status = ? ORDER BY id LIMIT ?");
    s.bind(1, std::string(to_string(status))).bind(2, static_cast<std::int64_t>(limit));
    std::vector<Id> out;
    while (s.step()) out.push_back(s.integer(0));
    s.reset();
    return out;
}

std::vector<Id> Store::candidates_without_feasibility(int limit) const {
    auto r = impl_->reader();
    auto& s = r.prepare("SELECT rc.latest_revision_id FROM recipes rc WHERE rc.status = 'candidate' AND NOT EXISTS "
                        "(SELECT 1 FROM verdicts v WHERE v.revision_id = rc.latest_revision_id AND v.gate = 'feasibility') "
                        "ORDER BY rc.id LIMIT ?");
    s.bind(1, static_cast<std::int64_t>(limit));
    std::vector<Id> out;
    while (s.step()) out.push_back(s.integer(0));
    s.reset();
    return out;
}

namespace {

// Each recipe's newest revision with its source and status: the heads, all or one recipe's.
constexpr const char* kRevisionHeads =
    "SELECT r.id, r.recipe_id, r.sha256, src.url, r.path, s.status FROM recipes rc "
    "JOIN recipe_revisions r ON r.id = rc.latest_revision_id JOIN revision_status s ON s.revision_id = r.id "
    "LEFT JOIN sources src ON src.id = r.source_id";

RevisionHead head_of(const Statement& s) {
    return {s.integer(0), s.text(1), s.text(2), s.optional_text(3).value_or(""), s.text(4), status_from(s.text(5))};
}

}  // namespace

std::vector<RevisionHead> Store::latest_revision_heads() const {
    auto r = impl_->reader();
    auto& s = r.prepare(std::string(kRevisionHeads) + " ORDER BY rc.id");
    std::vector<RevisionHead> out;
    while (s.step()) out.push_back(head_of(s));
    s.reset();
    return out;
}

std::vector<RevisionHead> Store::latest_revision_heads(const std::set<std::string>& recipe_ids) const {
    auto r = impl_->reader();
    auto& s = r.prepare(std::string(kRevisionHeads) + " WHERE rc.id = ?");
    std::vector<RevisionHead> out;
    for (const auto& id : recipe_ids) {
        s.bind(1, id);
        while (s.step()) out.push_back(head_of(s));
        s.reset();
    }
    return out;
}

std::vector<SupersededRevision> Store::superseded_open_revisions(int limit) const {
    auto r = impl_->reader();
    auto& s = r.prepare("SELECT s.revision_id, r.recipe_id, s.status, rc.latest_revision_id FROM revision_status s "
                        "JOIN recipe_revisions r ON r.id = s.revision_id JOIN recipes rc ON rc.id = r.recipe_id "
                        "WHERE s.status IN ('candidate', 'qualifying', 'validated', 'failed') AND rc.latest_revision_id != s.revision_id "
                        "ORDER BY s.revision_id LIMIT ?");
    s.bind(1, static_cast<std::int64_t>(std::max(limit, 1)));
    std::vector<SupersededRevision> out;
    while (s.step()) out.push_back({s.integer(0), s.text(1), status_from(s.text(2)), s.integer(3)});
    s.reset();
    return out;
}

std::map<std::string, std::pair<Id, Status>> Store::latest_revisions() const {
    auto r = impl_->reader();
    auto& s = r.prepare("SELECT id, latest_revision_id, status FROM recipes WHERE latest_revision_id IS NOT NULL");
    std::map<std::string, std::pair<Id, Status>> out;
    while (s.step()) out.emplace(s.text(0), std::make_pair(s.integer(1), status_from(s.text(2))));
    s.reset();
    return out;
}

}  // namespace anvil::state
