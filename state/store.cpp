#include "state/store.hpp"

#include <sqlite3.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <type_traits>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "state/migrations.hpp"

namespace anvil::state {

using nlohmann::json;

namespace {

// The same text nlohmann writes ("[]", "[1,2,3]"), without building a json value per row.
std::string ids_json(const std::vector<Id>& ids) {
    if (ids.empty()) return "[]";
    std::string out = "[";
    for (std::size_t i = 0; i < ids.size(); ++i) {
        if (i > 0) out += ',';
        out += std::to_string(ids[i]);
    }
    out += ']';
    return out;
}
std::vector<Id> parse_ids(const std::string& text) { return json::parse(text).get<std::vector<Id>>(); }
std::vector<std::string> parse_strings(const std::string& text) { return json::parse(text).get<std::vector<std::string>>(); }

SqlValue to_sql(const std::optional<registry::Number>& n) {
    if (!n) return std::monostate{};
    if (std::holds_alternative<std::int64_t>(*n)) return std::get<std::int64_t>(*n);
    return std::get<double>(*n);
}

std::optional<registry::Number> to_number(const SqlValue& v) {
    if (std::holds_alternative<std::int64_t>(v)) return registry::Number{std::get<std::int64_t>(v)};
    if (std::holds_alternative<double>(v)) return registry::Number{std::get<double>(v)};
    return std::nullopt;
}

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

// What `?q=` searches: the id and the start of the description. Bounded, so a huge description is
// stored once (in the document), not again as search text and again in the trigram index.
constexpr std::size_t kSearchTextBytes = 4096;
std::string search_text_of(const registry::Recipe& recipe) {
    std::string text = lower(recipe.id + "\n" + recipe.description);
    if (text.size() <= kSearchTextBytes) return text;
    std::size_t cut = kSearchTextBytes;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // never split a UTF-8 sequence
    text.resize(cut);
    return text;
}

Status status_from(const std::string& text) {
    auto s = parse_status(text);
    if (!s) throw StoreError("state database holds an unknown status '" + text + "'");
    return *s;
}

// Columns: id, revision_id, from_status, to_status, reason, evidence_ids, verdict_ids, commit_id,
// actor, created_at.
TransitionRow read_transition(const Statement& s) {
    TransitionRow t;
    t.id = s.integer(0);
    t.revision_id = s.integer(1);
    if (!s.is_null(2)) t.from = status_from(s.text(2));
    t.to = status_from(s.text(3));
    t.reason = s.text(4);
    t.evidence_ids = parse_ids(s.text(5));
    t.verdict_ids = parse_ids(s.text(6));
    t.commit_id = s.optional_text(7);
    t.actor = s.text(8);
    t.created_at = s.text(9);
    return t;
}

}  // namespace

// A connection with its prepared statements, prepared once and reused.
struct CachedConnection {
    Connection conn;
    std::unordered_map<std::string, std::unique_ptr<Statement>> cache;

    CachedConnection(const std::filesystem::path& path, OpenMode mode) : conn(path, mode) {}

    Statement& prepare(const std::string& sql) {
        auto it = cache.find(sql);
        if (it == cache.end()) it = cache.emplace(sql, std::make_unique<Statement>(conn, sql)).first;
        it->second->reset();
        return *it->second;
    }

    // An unfinished statement keeps its read transaction open, pinning an old WAL snapshot; every
    // borrower must leave the connection with none.
    void finish_all() {
        for (auto& [_, statement] : cache) statement->reset();
    }
};

struct Store::Impl {
    StoreOptions options;
    std::filesystem::path path;
    std::unique_ptr<CachedConnection> writer;
    std::mutex write_mutex;
    OpenMode reader_mode = OpenMode::read_only;
    mutable std::mutex readers_mutex;
    mutable std::vector<std::unique_ptr<CachedConnection>> idle_readers;

    // Borrows a reader connection for one query and gives it back.
    class Lease {
    public:
        Lease(const Impl& impl, std::unique_ptr<CachedConnection> c) : impl_(impl), c_(std::move(c)) {}
        ~Lease() {
            c_->finish_all();
            std::lock_guard lock(impl_.readers_mutex);
            impl_.idle_readers.push_back(std::move(c_));
        }
        CachedConnection* operator->() { return c_.get(); }
        Statement& prepare(const std::string& sql) { return c_->prepare(sql); }

    private:
        const Impl& impl_;
        std::unique_ptr<CachedConnection> c_;
    };

    Lease reader() const {
        {
            std::lock_guard lock(readers_mutex);
            if (!idle_readers.empty()) {
                auto c = std::move(idle_readers.back());
                idle_readers.pop_back();
                return Lease(*this, std::move(c));
            }
        }
        return Lease(*this, std::make_unique<CachedConnection>(path, reader_mode));
    }

    Statement& w(const std::string& sql) { return writer->prepare(sql); }

    // The source_commits row of one sync; the caller holds the transaction.
    Id insert_sync(Id source_id, const registry::SyncReport& report);

    // The statements of a guarded transition, run thousands of times per batch: held by pointer
    // (into the writer's cache, which never drops one) instead of looked up by their SQL text.
    struct Hot {
        Statement* select_revision = nullptr;
        Statement* insert_transition = nullptr;
        Statement* update_status = nullptr;
        Statement* insert_status = nullptr;
        Statement* update_summary = nullptr;
    } hot;

    Statement& hot_statement(Statement*& slot, const char* sql) {
        if (!slot) return *(slot = &w(sql));  // prepare() leaves it reset
        slot->reset();
        return *slot;
    }

    // ---- pieces of write transactions; the caller holds the transaction ----

    // The ledger row, the status cache and the recipe summary: three writes, one transaction (the
    // caller's). Every lookup goes through a primary key.
    Id insert_transition(Id revision_id, const std::string& recipe_id, const std::string& slot, std::optional<Status> from,
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

    std::set<std::string> gates_passed_locally(Id revision_id) {
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

    // `now` is the transaction's timestamp: every transition of one batch is written at one time.
    Id guarded_transition(const TransitionRequest& r, const std::string& now) {
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

    // The recipes row's summary columns and search index follow the newest revision.
    void make_newest(const registry::Document& doc, Id revision_id) {
        const auto* recipe = doc.recipe();
        // The external-content search index forgets the old text before the row changes.
        auto& unindex = w("INSERT INTO recipe_search (recipe_search, rowid, search_text) SELECT 'delete', rowid, search_text FROM recipes "
                          "WHERE id = ? AND search_text != ''");
        unindex.bind(1, recipe->id);
        unindex.run();
        auto& summary = w("UPDATE recipes SET latest_revision_id = ?2, engine = ?3, hardware_id = ?4, pinned = ?5, "
                          "verdict = (SELECT coalesce(class, result) FROM verdicts WHERE revision_id = ?2 AND gate = 'feasibility' "
                          "ORDER BY id DESC LIMIT 1), status = (SELECT status FROM revision_status WHERE revision_id = ?2), "
                          "search_text = ?6 WHERE id = ?1");
        summary.bind(1, recipe->id).bind(2, revision_id).bind(3, recipe->engine_name).bind(4, recipe->hardware_id);
        summary.bind(5, static_cast<std::int64_t>(doc.pins.pinned() ? 1 : 0)).bind(6, search_text_of(*recipe));
        summary.run();
        auto& index = w("INSERT INTO recipe_search (rowid, search_text) SELECT rowid, search_text FROM recipes WHERE id = ?");
        index.bind(1, recipe->id);
        index.run();
    }

    // Bytes already recorded as a revision that is not the newest: the registry went back to them.
    void return_to_newest(const registry::Document& doc, Id revision_id, const std::string& actor) {
        const auto* recipe = doc.recipe();
        auto& newest = w("SELECT latest_revision_id FROM recipes WHERE id = ?");
        newest.bind(1, recipe->id);
        const bool already = newest.step() && !newest.is_null(0) && newest.integer(0) == revision_id;
        newest.reset();
        if (already) return;
        make_newest(doc, revision_id);
        auto& status = w("SELECT status FROM revision_status WHERE revision_id = ?");
        status.bind(1, revision_id);
        const bool retired = status.step() && status.text(0) == "retired";
        status.reset();
        if (!retired) return;
        TransitionRequest back{revision_id, Status::candidate,
                               "back in the registry at " + doc.provenance.path +
                                   (doc.provenance.commit.empty() ? std::string() : " at commit " + doc.provenance.commit.substr(0, 12)),
                               actor, {}, {}, doc.provenance.commit.empty() ? std::nullopt : std::optional(doc.provenance.commit)};
        guarded_transition(back, now_iso8601());
    }

    Store::Ingested ingest(Id source_id, const registry::Document& doc, const std::string& actor) {
        const auto* recipe = doc.recipe();
        auto& existing = w("SELECT id FROM recipe_revisions WHERE recipe_id = ? AND sha256 = ?");
        existing.bind(1, recipe->id).bind(2, doc.provenance.sha256);
        if (existing.step()) {
            Store::Ingested out{existing.integer(0), false};
            existing.reset();
            return_to_newest(doc, out.revision_id, actor);
            return out;
        }
        existing.reset();
        const std::string now = now_iso8601();
        auto& recipe_row = w("INSERT INTO recipes (id, first_seen_at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING");
        recipe_row.bind(1, recipe->id).bind(2, now);
        recipe_row.run();

        std::string slot = "default";
        if (auto it = doc.raw.find("serving"); it != doc.raw.end() && it->is_object() && it->contains("slot") && (*it)["slot"].is_string())
            slot = (*it)["slot"].get<std::string>();
        auto& insert = w("INSERT INTO recipe_revisions (recipe_id, sha256, source_id, commit_id, path, blob_id, engine, hardware_id, "
                         "launch_kind, serving_slot, pinned, unpinned_reasons, document, created_at) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
        insert.bind(1, recipe->id).bind(2, doc.provenance.sha256);
        if (source_id > 0) insert.bind(3, source_id);
        else insert.bind_null(3);
        insert.bind(4, doc.provenance.commit).bind(5, doc.provenance.path).bind(6, doc.provenance.blob_id);
        insert.bind(7, recipe->engine_name).bind(8, recipe->hardware_id).bind(9, recipe->launch.kind).bind(10, slot);
        insert.bind(11, static_cast<std::int64_t>(doc.pins.pinned() ? 1 : 0)).bind(12, json(doc.pins.unpinned_reasons).dump());
        insert.bind(13, doc.to_json().dump()).bind(14, now);
        insert.run();
        const Id revision_id = writer->conn.last_insert_id();
        make_newest(doc, revision_id);

        TransitionRequest first;
        first.revision_id = revision_id;
        first.to = Status::candidate;
        first.reason = "new revision from " + doc.provenance.path +
                       (doc.provenance.commit.empty() ? std::string() : " at commit " + doc.provenance.commit.substr(0, 12));
        first.actor = actor;
        if (!doc.provenance.commit.empty()) first.commit_id = doc.provenance.commit;
        TransitionFacts facts{std::nullopt, Status::candidate, first.reason, actor, false, {}, {}, {}};
        if (auto refusal = refuse_transition(facts)) throw TransitionRefused(*refusal);
        insert_transition(revision_id, recipe->id, slot, std::nullopt, first, now);
        return {revision_id, true};
    }

    RevisionRow read_revision(Statement& s) const {
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
};

namespace {
constexpr const char* kUnknownReadOnlyCause = "SQLite could not open it for writing";

// Why a file cannot be written, in the words a user can act on.
std::string read_only_cause(const std::filesystem::path& file) {
    struct statvfs fs {};
    if (statvfs(file.c_str(), &fs) == 0 && (fs.f_flag & ST_RDONLY)) return "on a read-only file system";
    if (access(file.c_str(), W_OK) != 0) return "no write permission on the file";
    const auto dir = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
    if (access(dir.c_str(), W_OK) != 0) return "no write permission on its directory";
    return kUnknownReadOnlyCause;
}

constexpr const char* kRevisionColumns =
    "SELECT r.id, r.recipe_id, r.sha256, src.url, r.commit_id, r.path, r.blob_id, r.engine, r.hardware_id, r.launch_kind, "
    "r.serving_slot, r.pinned, r.unpinned_reasons, s.status, r.created_at, r.document FROM recipe_revisions r "
    "JOIN revision_status s ON s.revision_id = r.id LEFT JOIN sources src ON src.id = r.source_id ";
}

Store::Store(std::filesystem::path file, StoreOptions options) : impl_(std::make_unique<Impl>()), path_(std::move(file)) {
    impl_->options = std::move(options);
    impl_->path = path_;
    std::error_code ec;
    if (path_.has_parent_path()) std::filesystem::create_directories(path_.parent_path(), ec);
    try {
        impl_->writer = std::make_unique<CachedConnection>(path_, OpenMode::read_write_create);
        auto& db = impl_->writer->conn;
        db.exec("PRAGMA journal_mode = WAL");
        db.exec("PRAGMA synchronous = FULL");  // a committed transition survives power loss, not only a crash
        db.exec("PRAGMA foreign_keys = ON");
        // A large transaction grows the WAL; once checkpointed it is cut back instead of keeping
        // a second copy of what the database already holds.
        db.exec("PRAGMA journal_size_limit = 16777216");
        const int found = migrate(db, impl_->options.target_schema_version);
        if (found != schema_version()) spdlog::info("state database {}: migrated schema {} → {}", path_.string(), found, schema_version());
    } catch (const StoreError& e) {
        if (e.sqlite_code != SQLITE_READONLY && e.sqlite_code != SQLITE_CANTOPEN && e.sqlite_code != SQLITE_IOERR &&
            e.sqlite_code != SQLITE_PERM)
            throw;
        if (!std::filesystem::exists(path_)) throw;
        impl_->writer.reset();
        const std::string cause = read_only_cause(path_);
        write_error_ = "state database " + path_.string() + " is read-only (" + cause +
                       "): writes are refused until it is writable; reads continue";
        if (cause == kUnknownReadOnlyCause) write_error_ += " [" + std::string(e.what()) + "]";
        spdlog::error("{}; serving reads only", write_error_);
        try {
            Connection probe(path_, OpenMode::read_only);
            probe.exec("SELECT count(*) FROM sqlite_master");
        } catch (const StoreError&) {
            impl_->reader_mode = OpenMode::immutable;
        }
        if (schema_version() != current_schema_version())
            throw StoreError("state database " + path_.string() + " needs a schema migration (version " +
                             std::to_string(schema_version()) + ") but cannot be written: " + write_error_);
    }
}

Store::~Store() = default;

int Store::schema_version() const {
    auto r = impl_->reader();
    auto& s = r.prepare("PRAGMA user_version");
    s.step();
    return static_cast<int>(s.integer(0));
}

template <typename Body>
auto Store::write(std::string_view what, Body&& body) {
    if (!write_error_.empty()) throw StoreError("cannot write " + std::string(what) + ": " + write_error_, SQLITE_READONLY);
    std::lock_guard lock(impl_->write_mutex);
    Transaction tx(impl_->writer->conn);  // rolls back unless committed
    if constexpr (std::is_void_v<decltype(body())>) {
        body();
        tx.commit();
    } else {
        auto out = body();
        tx.commit();
        return out;
    }
}

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
        insert.bind(1, url).bind(2, ref).bind(3, now_iso8601());
        insert.run();
        return impl_->writer->conn.last_insert_id();
    });
}

Id Store::record_sync(Id source_id, const registry::SyncReport& report) {
    return write("a sync", [&] { return impl_->insert_sync(source_id, report); });
}

Id Store::Impl::insert_sync(Id source_id, const registry::SyncReport& report) {
    auto& insert = w("INSERT INTO source_commits (source_id, commit_id, mode, added, modified, deleted, renamed, seen_at) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
    insert.bind(1, source_id).bind(2, report.commit).bind(3, std::string(registry::to_string(report.mode)));
    insert.bind(4, static_cast<std::int64_t>(report.added)).bind(5, static_cast<std::int64_t>(report.modified));
    insert.bind(6, static_cast<std::int64_t>(report.deleted)).bind(7, static_cast<std::int64_t>(report.renamed)).bind(8, now_iso8601());
    insert.run();
    return writer->conn.last_insert_id();
}

Store::Ingested Store::ingest_revision(Id source_id, const registry::Document& doc, const std::string& actor) {
    return ingest_revisions(source_id, {&doc}, actor).front();
}

std::vector<Store::Ingested> Store::ingest_revisions(Id source_id, const std::vector<const registry::Document*>& docs,
                                                     const std::string& actor, const registry::SyncReport* sync) {
    return write("revisions", [&] {
        for (const auto* doc : docs) {
            if (!doc->recipe() || !doc->valid())
                throw StoreError("only valid recipe documents become revisions (" + doc->provenance.path + " is not one)");
        }
        if (sync) impl_->insert_sync(source_id, *sync);
        std::vector<Ingested> out;
        out.reserve(docs.size());
        for (const auto* doc : docs) out.push_back(impl_->ingest(source_id, *doc, actor));
        return out;
    });
}

Id Store::add_evidence(const EvidenceRow& row) {
    return write("evidence", [&] {
        if (row.metric.empty()) throw StoreError("evidence needs a metric name");
        if (row.source.empty()) throw StoreError("evidence for " + row.metric + " needs a source");
        auto& insert = impl_->w("INSERT INTO evidence (revision_id, metric, value_min, value_max, unit, status, class, source, observed_at, "
                                "receipt_sha256, receipt_path, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
        insert.bind(1, row.revision_id).bind(2, row.metric).bind(3, to_sql(row.min)).bind(4, to_sql(row.max)).bind(5, row.unit);
        insert.bind(6, std::string(registry::to_string(row.status))).bind(7, std::string(to_string(row.evidence_class)));
        insert.bind(8, row.source).bind(9, row.observed_at.empty() ? now_iso8601() : row.observed_at);
        insert.bind(10, row.receipt_sha256).bind(11, row.receipt_path).bind(12, now_iso8601());
        insert.run();
        return impl_->writer->conn.last_insert_id();
    });
}

Id Store::add_verdict(const VerdictRow& row) { return add_verdicts({row}).front(); }

std::vector<Id> Store::add_verdicts(const std::vector<VerdictRow>& rows) {
    return write("verdicts", [&] {
        for (const auto& row : rows)
            if (row.gate.empty()) throw StoreError("a verdict needs a gate name");
        std::vector<Id> ids;
        ids.reserve(rows.size());
        for (const auto& row : rows) {
            auto& insert = impl_->w("INSERT INTO verdicts (revision_id, gate, result, class, reasons, evidence_ids, created_at) "
                                    "VALUES (?, ?, ?, ?, ?, ?, ?)");
            insert.bind(1, row.revision_id).bind(2, row.gate).bind(3, std::string(to_string(row.result))).bind(4, row.verdict_class);
            insert.bind(5, json(row.reasons).dump()).bind(6, ids_json(row.evidence_ids)).bind(7, now_iso8601());
            insert.run();
            ids.push_back(impl_->writer->conn.last_insert_id());
            if (row.gate == "feasibility") {
                auto& summary = impl_->w("UPDATE recipes SET verdict = ?2 WHERE id = (SELECT recipe_id FROM recipe_revisions WHERE id = ?1) "
                                         "AND latest_revision_id = ?1");
                summary.bind(1, row.revision_id).bind(2, row.verdict_class.value_or(std::string(to_string(row.result))));
                summary.run();
            }
        }
        return ids;
    });
}

Id Store::transition(const TransitionRequest& request) { return transition_batch({request}).front(); }

std::vector<Id> Store::transition_batch(const std::vector<TransitionRequest>& requests) {
    return write("transitions", [&] {
        std::vector<Id> ids;
        ids.reserve(requests.size());
        const std::string now = now_iso8601();
        for (const auto& r : requests) ids.push_back(impl_->guarded_transition(r, now));
        return ids;
    });
}

Store::Promotion Store::promote(Id revision_id, const std::string& reason, const std::string& actor,
                                const std::vector<Id>& evidence_ids, const std::vector<Id>& verdict_ids) {
    return write("a promotion", [&] {
        Promotion out;
        const std::string now = now_iso8601();
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

Id Store::record_engine_start(const EngineRow& row) {
    return write("an engine", [&] {
        auto& insert = impl_->w("INSERT INTO engines (revision_id, driver, pid, container_id, port, started_at, health, health_at, "
                                "engine_key, role) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
        const std::string now = now_iso8601();
        insert.bind(1, row.revision_id).bind(2, row.driver).bind(3, row.pid).bind(4, row.container_id).bind(5, row.port);
        insert.bind(6, row.started_at.empty() ? now : row.started_at).bind(7, row.health.empty() ? "starting" : row.health).bind(8, now);
        insert.bind(9, row.engine_key).bind(10, row.role);
        insert.run();
        return impl_->writer->conn.last_insert_id();
    });
}

void Store::record_engine_health(Id engine_id, const std::string& health) {
    write("an engine's health", [&] {
        auto& update = impl_->w("UPDATE engines SET health = ?2, health_at = ?3 WHERE id = ?1");
        update.bind(1, engine_id).bind(2, health).bind(3, now_iso8601());
        update.run();
    });
}

void Store::record_engine_stop(Id engine_id, std::optional<std::int64_t> exit_code) {
    write("an engine's stop", [&] {
        const std::string now = now_iso8601();
        auto& update = impl_->w("UPDATE engines SET stopped_at = ?2, exit_code = ?3, health = 'exited', health_at = ?2 WHERE id = ?1");
        update.bind(1, engine_id).bind(2, now).bind(3, exit_code);
        update.run();
    });
}

Id Store::append_event(const std::string& kind, const std::string& subject, const std::string& message, const json& data) {
    return write("an event", [&] {
        auto& insert = impl_->w("INSERT INTO events (kind, subject, message, data, created_at) VALUES (?, ?, ?, ?, ?)");
        insert.bind(1, kind).bind(2, subject).bind(3, message).bind(4, data.dump()).bind(5, now_iso8601());
        insert.run();
        return impl_->writer->conn.last_insert_id();
    });
}

// ---------------------------------------------------------------- reads

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
        for (char c : lower(*f.text)) {
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

    auto& list = r.prepare("SELECT id, latest_revision_id, status, engine, hardware_id, pinned, verdict FROM recipes" + where +
                           " ORDER BY id LIMIT ? OFFSET ?");
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
    if (s.step()) out = impl_->read_revision(s);
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
    while (revisions.step()) detail.revisions.push_back(impl_->read_revision(revisions));
    revisions.reset();
    if (detail.revisions.empty()) return std::nullopt;

    auto& evidence = r.prepare("SELECT e.id, e.revision_id, e.metric, e.value_min, e.value_max, e.unit, e.status, e.class, e.source, "
                               "e.observed_at, e.receipt_sha256, e.receipt_path, e.created_at FROM evidence e "
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
    if (s.step()) out = impl_->read_revision(s);
    s.reset();
    return out;
}

std::vector<EngineRow> Store::running_engines() const {
    auto r = impl_->reader();
    auto& s = r.prepare("SELECT id, revision_id, driver, pid, container_id, port, started_at, health, health_at, engine_key, role FROM engines "
                        "WHERE stopped_at IS NULL ORDER BY id");
    std::vector<EngineRow> out;
    while (s.step()) {
        EngineRow e;
        e.id = s.integer(0);
        if (!s.is_null(1)) e.revision_id = s.integer(1);
        e.driver = s.text(2);
        if (!s.is_null(3)) e.pid = s.integer(3);
        e.container_id = s.optional_text(4);
        if (!s.is_null(5)) e.port = s.integer(5);
        e.started_at = s.text(6);
        e.health = s.text(7);
        e.health_at = s.text(8);
        e.engine_key = s.optional_text(9).value_or("");
        e.role = s.text(10);
        out.push_back(std::move(e));
    }
    s.reset();
    return out;
}

std::vector<FeedItem> Store::feed_since(FeedCursor after, int limit) const {
    limit = std::clamp(limit, 1, 1000);
    auto r = impl_->reader();
    std::vector<FeedItem> transitions, events;
    auto& t = r.prepare("SELECT t.id, r.recipe_id, t.revision_id, t.from_status, t.to_status, t.reason, t.actor, t.created_at "
                        "FROM transitions t JOIN recipe_revisions r ON r.id = t.revision_id WHERE t.id > ? ORDER BY t.id LIMIT ?");
    t.bind(1, after.transition).bind(2, static_cast<std::int64_t>(limit));
    while (t.step()) {
        FeedItem item;
        item.cursor.transition = t.integer(0);
        item.kind = "transition";
        item.subject = t.text(1);
        const std::string from = t.optional_text(3).value_or("(new)");
        item.message = from + " → " + t.text(4) + ": " + t.text(5);
        item.data = {{"transition_id", t.integer(0)}, {"revision_id", t.integer(2)}, {"from", t.is_null(3) ? json() : json(t.text(3))},
                     {"to", t.text(4)}, {"actor", t.text(6)}};
        item.created_at = t.text(7);
        transitions.push_back(std::move(item));
    }
    t.reset();
    auto& e = r.prepare("SELECT id, kind, subject, message, data, created_at FROM events WHERE id > ? ORDER BY id LIMIT ?");
    e.bind(1, after.event).bind(2, static_cast<std::int64_t>(limit));
    while (e.step()) {
        FeedItem item;
        item.cursor.event = e.integer(0);
        item.kind = e.text(1);
        item.subject = e.text(2);
        item.message = e.text(3);
        item.data = json::parse(e.text(4));
        item.created_at = e.text(5);
        events.push_back(std::move(item));
    }
    e.reset();
    // Merge by time; each item's cursor is the pair of high-water marks once it has been read.
    std::vector<FeedItem> out;
    FeedCursor mark = after;
    std::size_t i = 0, j = 0;
    while (out.size() < static_cast<std::size_t>(limit) && (i < transitions.size() || j < events.size())) {
        const bool take_transition = j >= events.size() || (i < transitions.size() && transitions[i].created_at <= events[j].created_at);
        FeedItem item = take_transition ? std::move(transitions[i++]) : std::move(events[j++]);
        if (take_transition) mark.transition = item.cursor.transition;
        else mark.event = item.cursor.event;
        item.cursor = mark;
        out.push_back(std::move(item));
    }
    return out;
}

std::vector<TransitionRow> Store::transitions_since(Id cursor, int limit) const {
    auto r = impl_->reader();
    auto& s = r.prepare("SELECT id, revision_id, from_status, to_status, reason, evidence_ids, verdict_ids, commit_id, actor, created_at "
                        "FROM transitions WHERE id > ? ORDER BY id LIMIT ?");
    s.bind(1, cursor).bind(2, static_cast<std::int64_t>(std::max(limit, 1)));
    std::vector<TransitionRow> out;
    while (s.step()) out.push_back(read_transition(s));
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

std::uint64_t Store::write_generation() const { return impl_->writer ? impl_->writer->conn.commits() : 0; }

std::string Store::integrity_check() const {
    auto r = impl_->reader();
    auto& s = r.prepare("PRAGMA integrity_check");
    std::string out;
    while (s.step()) out += (out.empty() ? "" : "\n") + s.text(0);
    s.reset();
    return out;
}

// ---------------------------------------------------------------- daemon support

void Store::set_setting(const std::string& key, const json& value, const std::string& actor) {
    write("a setting", [&] {
        const std::string now = now_iso8601();
        auto& upsert = impl_->w("INSERT INTO settings (key, value, actor, updated_at) VALUES (?1, ?2, ?3, ?4) "
                                "ON CONFLICT (key) DO UPDATE SET value = ?2, actor = ?3, updated_at = ?4");
        upsert.bind(1, key).bind(2, value.dump()).bind(3, actor).bind(4, now);
        upsert.run();
        auto& event = impl_->w("INSERT INTO events (kind, subject, message, data, created_at) VALUES ('setting', ?, ?, ?, ?)");
        event.bind(1, key).bind(2, actor + " set " + key).bind(3, json{{"key", key}, {"value", value}, {"actor", actor}}.dump()).bind(4, now);
        event.run();
    });
}

void Store::clear_setting(const std::string& key, const std::string& actor) {
    write("a setting", [&] {
        auto& erase = impl_->w("DELETE FROM settings WHERE key = ?");
        erase.bind(1, key);
        erase.run();
        auto& event = impl_->w("INSERT INTO events (kind, subject, message, data, created_at) VALUES ('setting', ?, ?, ?, ?)");
        event.bind(1, key).bind(2, actor + " cleared " + key).bind(3, json{{"key", key}, {"value", nullptr}, {"actor", actor}}.dump());
        event.bind(4, now_iso8601());
        event.run();
    });
}

std::optional<json> Store::setting(const std::string& key) const {
    auto r = impl_->reader();
    auto& s = r.prepare("SELECT value FROM settings WHERE key = ?");
    s.bind(1, key);
    std::optional<json> out;
    if (s.step()) out = json::parse(s.text(0));
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
    while (s.step()) out.push_back(impl_->read_revision(s));
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

std::vector<RevisionHead> Store::latest_revision_heads() const {
    auto r = impl_->reader();
    auto& s = r.prepare("SELECT r.id, r.recipe_id, r.sha256, src.url, r.path, s.status FROM recipes rc "
                        "JOIN recipe_revisions r ON r.id = rc.latest_revision_id JOIN revision_status s ON s.revision_id = r.id "
                        "LEFT JOIN sources src ON src.id = r.source_id ORDER BY rc.id");
    std::vector<RevisionHead> out;
    while (s.step()) out.push_back({s.integer(0), s.text(1), s.text(2), s.optional_text(3).value_or(""), s.text(4), status_from(s.text(5))});
    s.reset();
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
