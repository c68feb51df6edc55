// The daemon's memory: one SQLite file (WAL, foreign keys, busy timeout, versioned schema) holding
// the ledger. One writer connection serialises every logical change into one transaction; reads go
// through their own connections and never block it. When the file cannot be written (read-only
// file or mount) the store still opens and serves reads, and every write says why it cannot.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <set>
#include <string>
#include <vector>

#include "registry/catalog.hpp"
#include "registry/document.hpp"
#include "state/records.hpp"
#include "state/revision_input.hpp"
#include "state/settings.hpp"
#include "state/sqlite.hpp"

namespace anvil::state {

struct TransitionRefused : StoreError {
    using StoreError::StoreError;
};

struct StoreOptions {
    std::vector<std::string> hard_gates = default_hard_gates();
    int target_schema_version = 0;  // 0: the newest; tests write files of earlier versions
};

class Store {
public:
    explicit Store(std::filesystem::path file, StoreOptions options = {});
    ~Store();
    Store(const Store&) = delete;
    Store& operator=(const Store&) = delete;

    const std::filesystem::path& path() const { return path_; }
    bool writable() const { return write_error_.empty(); }
    // Changes each time a write transaction of this store commits (the store is the database's one
    // writer). A query result read while it stayed the same can be served again until it moves.
    std::uint64_t write_generation() const;
    const std::string& write_error() const { return write_error_; }
    // Writes that failed for a cause that lasts (lasting_write_failure): how many so far, and the
    // last one's code and message. The controller compares counts around a pass.
    struct WriteFailures {
        std::uint64_t count = 0;
        int sqlite_code = 0;
        std::string message;
    };
    WriteFailures write_failures() const;
    // The clock every row's time (created_at, a transition's, an engine's) is read from: the
    // system's unless the controller gives its own (its tests move a fake one). Set before use.
    void use_clock(std::function<std::chrono::system_clock::time_point()> clock);
    int schema_version() const;

    // ---- writes: each is one transaction ----
    Id upsert_source(const std::string& url, const std::string& ref);

    struct Ingested {
        Id revision_id = 0;
        bool created = false;  // false: these exact bytes were already a revision of this recipe
    };
    // Records a valid recipe document as a revision (a new one starts as `candidate`; a new
    // revision of a promoted recipe does not inherit its status). Bytes that are already a revision
    // make it the recipe's newest again (a revert or a force-push back): the registry decides what
    // is newest, and a retired revision that returns is a candidate again.
    Ingested ingest_revision(Id source_id, const RevisionInput& revision, const std::string& actor = "reconciler");
    // Every revision of one registry commit in one transaction (a span, so that a braced list of
    // document pointers still means the overload below): the commit lands whole or not at all,
    // with the sync that read it (`sync`: the commit, its mode and counts) when given.
    std::vector<Ingested> ingest_revisions(Id source_id, std::span<const RevisionInput> revisions,
                                           const std::string& actor = "reconciler", const registry::SyncReport* sync = nullptr);
    // The same from the registry's documents (each made a RevisionInput by revision_input()); only
    // valid recipe documents become revisions.
    Ingested ingest_revision(Id source_id, const registry::Document& doc, const std::string& actor = "reconciler");
    std::vector<Ingested> ingest_revisions(Id source_id, const std::vector<const registry::Document*>& docs,
                                           const std::string& actor = "reconciler", const registry::SyncReport* sync = nullptr);
    Id add_evidence(const EvidenceRow& row);
    Id add_verdict(const VerdictRow& row);
    // Many verdicts in one transaction (the feasibility of a whole registry commit).
    std::vector<Id> add_verdicts(const std::vector<VerdictRow>& rows);
    // A qualification's evidence, verdicts and closing transition (to validated, failed or retired) in
    // one transaction; the guard sees the verdicts written in it. Throws TransitionRefused, leaving
    // no row behind, when the transition is refused.
    QualificationRecorded record_qualification(const QualificationRecord& record);
    // Guarded; throws TransitionRefused naming the guard that failed.
    Id transition(const TransitionRequest& request);
    // Many transitions in one transaction: all or none.
    std::vector<Id> transition_batch(const std::vector<TransitionRequest>& requests);

    struct Promotion {
        Id promoted_transition = 0;
        std::optional<Id> retired_revision;
        std::optional<Id> retired_transition;
    };
    // The old default of the slot becomes retired and this revision promoted, in one transaction.
    Promotion promote(Id revision_id, const std::string& reason, const std::string& actor,
                      const std::vector<Id>& evidence_ids = {}, const std::vector<Id>& verdict_ids = {});

    Id record_engine_start(const EngineRow& row);
    void record_engine_health(Id engine_id, const std::string& health);
    void record_engine_stop(Id engine_id, std::optional<std::int64_t> exit_code);
    Id append_event(const std::string& kind, const std::string& subject, const std::string& message,
                    const nlohmann::json& data = nlohmann::json::object());

    // An operator's setting (promotion pin, freeze): written with its actor, and as an event.
    // Prefer the typed accessors below; these stay while callers move to them.
    void set_setting(const std::string& key, const nlohmann::json& value, const std::string& actor);

    // The promotion settings, typed (state/settings.hpp). A set is written by its actor (the pin's
    // and the freeze's own); a clear says whether there was one, and writes an event only then.
    void set_pin(const PromotionPin& pin);
    bool clear_pin(const std::string& actor);
    void set_freeze(const PromotionFreeze& freeze);
    bool clear_freeze(const std::string& actor);
    void set_last_promotion(const LastPromotion& last, const std::string& actor);

    // ---- reads ----
    std::optional<nlohmann::json> setting(const std::string& key) const;
    std::optional<PromotionPin> pin() const;
    std::optional<PromotionFreeze> freeze() const;
    std::optional<LastPromotion> last_promotion() const;
    // The newest revision of each recipe whose status is `status`, by recipe id.
    std::vector<RevisionRow> latest_revisions_with_status(Status status, int limit = 1000) const;
    // The same, ids only (cheap over many thousands).
    std::vector<Id> latest_revision_ids_with_status(Status status, int limit = 100000) const;
    // Newest revisions still `candidate` with no feasibility verdict yet (a pass died before judging them).
    std::vector<Id> candidates_without_feasibility(int limit = 1000) const;
    // The newest revision of every recipe, without documents.
    std::vector<RevisionHead> latest_revision_heads() const;
    // The same for the named recipes only (those without a revision are left out), in recipe order.
    std::vector<RevisionHead> latest_revision_heads(const std::set<std::string>& recipe_ids) const;
    // Older revisions still open while their recipe has a newer one; the pass retires them.
    std::vector<SupersededRevision> superseded_open_revisions(int limit = 1000) const;
    // Every recipe id with at least one revision, and its newest revision's id and status.
    std::map<std::string, std::pair<Id, Status>> latest_revisions() const;
    RecipePage list_recipes(const RecipeFilter& filter) const;
    // How many recipes stand at each status (their newest revision's), every status present.
    std::map<Status, std::int64_t> recipes_by_status() const;
    std::optional<RecipeDetail> recipe(const std::string& id) const;
    std::optional<RevisionRow> revision(Id revision_id) const;
    std::optional<RevisionRow> current_default(const std::string& slot = "default") const;
    std::vector<EngineRow> running_engines() const;
    // Transitions and other events, oldest first, after `cursor` (see FeedCursor).
    // The cursor after everything the feed holds now (a client that wants only what comes next).
    FeedCursor feed_head() const;
    std::vector<FeedItem> feed_since(FeedCursor cursor, int limit = 100) const;
    std::vector<TransitionRow> transitions_since(Id cursor, int limit = 1000) const;
    std::optional<Status> status_of(Id revision_id) const;
    // The status cache, and the same thing recomputed from the transition ledger alone.
    std::map<Id, Status> statuses() const;
    std::map<Id, Status> statuses_from_ledger() const;
    // "ok", or what PRAGMA integrity_check found.
    std::string integrity_check() const;

private:
    bool clear_setting_if_set(const std::string& key, const std::string& actor);

    // Every write goes through here: refused when the store is read-only, then the write lock and
    // one transaction, committed when `body` returns and rolled back when it throws.
    template <typename Body>
    auto write(std::string_view what, Body&& body);

    struct Impl;
    std::unique_ptr<Impl> impl_;
    std::filesystem::path path_;
    std::string write_error_;
    void note_write_failure(const StoreError& e) const;
};

}  // namespace anvil::state
