// The store's sources, syncs and revisions: what the registry hands over, recorded once per content,
// and which revision is each recipe's newest.
#include "state/store_impl.hpp"
#include "support/text.hpp"

namespace anvil::state {

using nlohmann::json;
using namespace store_detail;

namespace {

// What `?q=` searches: the id and the start of the description. Bounded, so a huge description is
// stored once (in the document), not again as search text and again in the trigram index.
constexpr std::size_t kSearchTextBytes = 4096;
std::string search_text_of(const RevisionInput& revision) {
    std::string text = support::ascii_lower(revision.recipe_id + "\n" + revision.description);
    if (text.size() <= kSearchTextBytes) return text;
    std::size_t cut = kSearchTextBytes;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // never split a UTF-8 sequence
    text.resize(cut);
    return text;
}

}  // namespace

Id Store::upsert_source(const std::string& url, const std::string& ref) {
    return write("a source", [&] {
        auto& find = impl_->w("SELECT id FROM sources WHERE url = ? AND ref = ?");
        find.bind(1, url).bind(2, ref);
        if (find.step()) {
            const Id id = find.integer(0);
            find.reset();
            return id;
        }
        find.reset();
        auto& insert = impl_->w("INSERT INTO sources (url, ref, created_at) VALUES (?, ?, ?)");
        insert.bind(1, url).bind(2, ref).bind(3, impl_->now());
        insert.run();
        return impl_->writer->conn.last_insert_id();
    });
}

Id Store::Impl::insert_sync(Id source_id, const registry::SyncReport& report) {
    auto& insert = w("INSERT INTO source_commits (source_id, commit_id, mode, added, modified, deleted, renamed, seen_at) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
    insert.bind(1, source_id).bind(2, report.commit).bind(3, std::string(registry::to_string(report.mode)));
    insert.bind(4, static_cast<std::int64_t>(report.added)).bind(5, static_cast<std::int64_t>(report.modified));
    insert.bind(6, static_cast<std::int64_t>(report.deleted)).bind(7, static_cast<std::int64_t>(report.renamed)).bind(8, now());
    insert.run();
    return writer->conn.last_insert_id();
}

void Store::Impl::make_newest(const RevisionInput& revision, Id revision_id) {
    // The external-content search index forgets the old text before the row changes.
    auto& unindex = w("INSERT INTO recipe_search (recipe_search, rowid, search_text) SELECT 'delete', rowid, search_text FROM recipes "
                      "WHERE id = ? AND search_text != ''");
    unindex.bind(1, revision.recipe_id);
    unindex.run();
    auto& summary = w("UPDATE recipes SET latest_revision_id = ?2, engine = ?3, hardware_id = ?4, pinned = ?5, "
                      "verdict = (SELECT coalesce(class, result) FROM verdicts WHERE revision_id = ?2 AND gate = 'feasibility' "
                      "ORDER BY id DESC LIMIT 1), status = (SELECT status FROM revision_status WHERE revision_id = ?2), "
                      "search_text = ?6 WHERE id = ?1");
    summary.bind(1, revision.recipe_id).bind(2, revision_id).bind(3, revision.engine).bind(4, revision.hardware_id);
    summary.bind(5, static_cast<std::int64_t>(revision.pinned ? 1 : 0)).bind(6, search_text_of(revision));
    summary.run();
    auto& index = w("INSERT INTO recipe_search (rowid, search_text) SELECT rowid, search_text FROM recipes WHERE id = ?");
    index.bind(1, revision.recipe_id);
    index.run();
}

namespace {
// "<path> at commit <first 12 hex digits>", or the path alone when it came from no commit.
std::string where_from(const RevisionInput& revision) {
    return revision.path + (revision.commit_id.empty() ? std::string() : " at commit " + revision.commit_id.substr(0, 12));
}
std::optional<std::string> commit_of(const RevisionInput& revision) {
    return revision.commit_id.empty() ? std::nullopt : std::optional(revision.commit_id);
}
}  // namespace

void Store::Impl::return_to_newest(const RevisionInput& revision, Id revision_id, const std::string& actor) {
    auto& newest = w("SELECT latest_revision_id FROM recipes WHERE id = ?");
    newest.bind(1, revision.recipe_id);
    const bool already = newest.step() && !newest.is_null(0) && newest.integer(0) == revision_id;
    newest.reset();
    if (already) return;
    make_newest(revision, revision_id);
    auto& status = w("SELECT status FROM revision_status WHERE revision_id = ?");
    status.bind(1, revision_id);
    const bool retired = status.step() && status.text(0) == "retired";
    status.reset();
    if (!retired) return;
    TransitionRequest back{revision_id, Status::candidate, "back in the registry at " + where_from(revision), actor, {}, {}, commit_of(revision)};
    guarded_transition(back, now());
}

Store::Ingested Store::Impl::ingest(Id source_id, const RevisionInput& revision, const std::string& actor) {
    if (revision.recipe_id.empty() || revision.sha256.empty())
        throw StoreError("a revision needs its recipe id and the sha256 of its bytes (" + revision.path + ")");
    auto& existing = w("SELECT id FROM recipe_revisions WHERE recipe_id = ? AND sha256 = ?");
    existing.bind(1, revision.recipe_id).bind(2, revision.sha256);
    if (existing.step()) {
        Store::Ingested out{existing.integer(0), false};
        existing.reset();
        return_to_newest(revision, out.revision_id, actor);
        return out;
    }
    existing.reset();
    const std::string now = this->now();
    auto& recipe_row = w("INSERT INTO recipes (id, first_seen_at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING");
    recipe_row.bind(1, revision.recipe_id).bind(2, now);
    recipe_row.run();

    auto& insert = w("INSERT INTO recipe_revisions (recipe_id, sha256, source_id, commit_id, path, blob_id, engine, hardware_id, "
                     "launch_kind, serving_slot, pinned, unpinned_reasons, document, created_at) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    insert.bind(1, revision.recipe_id).bind(2, revision.sha256);
    if (source_id > 0) insert.bind(3, source_id);
    else insert.bind_null(3);
    insert.bind(4, revision.commit_id).bind(5, revision.path).bind(6, revision.blob_id);
    insert.bind(7, revision.engine).bind(8, revision.hardware_id).bind(9, revision.launch_kind).bind(10, revision.serving_slot);
    insert.bind(11, static_cast<std::int64_t>(revision.pinned ? 1 : 0)).bind(12, json(revision.unpinned_reasons).dump());
    insert.bind(13, revision.document).bind(14, now);
    insert.run();
    const Id revision_id = writer->conn.last_insert_id();
    make_newest(revision, revision_id);

    TransitionRequest first{revision_id, Status::candidate, "new revision from " + where_from(revision), actor, {}, {}, commit_of(revision)};
    TransitionFacts facts{std::nullopt, Status::candidate, first.reason, actor, false, {}, {}, {}};
    if (auto refusal = refuse_transition(facts)) throw TransitionRefused(*refusal);
    insert_transition(revision_id, revision.recipe_id, revision.serving_slot, std::nullopt, first, now);
    return {revision_id, true};
}

Store::Ingested Store::ingest_revision(Id source_id, const RevisionInput& revision, const std::string& actor) {
    return ingest_revisions(source_id, std::span(&revision, 1), actor).front();
}

std::vector<Store::Ingested> Store::ingest_revisions(Id source_id, std::span<const RevisionInput> revisions, const std::string& actor,
                                                     const registry::SyncReport* sync) {
    return write("revisions", [&] {
        if (sync) impl_->insert_sync(source_id, *sync);
        std::vector<Ingested> out;
        out.reserve(revisions.size());
        for (const auto& revision : revisions) out.push_back(impl_->ingest(source_id, revision, actor));
        return out;
    });
}

Store::Ingested Store::ingest_revision(Id source_id, const registry::Document& doc, const std::string& actor) {
    return ingest_revision(source_id, revision_input(doc), actor);
}

std::vector<Store::Ingested> Store::ingest_revisions(Id source_id, const std::vector<const registry::Document*>& docs,
                                                     const std::string& actor, const registry::SyncReport* sync) {
    std::vector<RevisionInput> revisions;
    revisions.reserve(docs.size());
    for (const auto* doc : docs) revisions.push_back(revision_input(*doc));
    return ingest_revisions(source_id, revisions, actor, sync);
}

}  // namespace anvil::state
