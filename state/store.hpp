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
#include "state/ledger.hpp"
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

class Store final : public RevisionLedger, public EvidenceLedger, public EngineLedger, public SettingsLedger, public Feed {
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
    // system's (also given as an empty function) unless the controller gives its own (its tests
    // move a fake one). Set while no other thread uses the store: at the controller's construction
    // and destruction.
    void use_clock(std::function<std::chrono::system_clock::time_point()> clock);
    int schema_version() const;

    // ---- writes: each is one transaction ----
    Id upsert_source(const std::string& url, const std::string& ref);

    // ---- RevisionLedger ----
    using Ingested = RevisionLedger::Ingested;
    using Promotion = RevisionLedger::Promotion;
    Ingested ingest_revision(Id source_id, const RevisionInput& revision, const std::string& actor = "reconciler") override;
    std::vector<Ingested> ingest_revisions(Id source_id, std::span<const RevisionInput> revisions,
                                           const std::string& actor = "reconciler", const registry::SyncReport* sync = nullptr) override;
    Ingested ingest_revision(Id source_id, const registry::Document& doc, const std::string& actor = "reconciler") override;
    std::vector<Ingested> ingest_revisions(Id source_id, const std::vector<const registry::Document*>& docs,
                                           const std::string& actor = "reconciler", const registry::SyncReport* sync = nullptr) override;
    Id transition(const TransitionRequest& request) override;
    std::vector<Id> transition_batch(const std::vector<TransitionRequest>& requests) override;
    Promotion promote(Id revision_id, const std::string& reason, const std::string& actor, const std::vector<Id>& evidence_ids = {},
                      const std::vector<Id>& verdict_ids = {}) override;
    std::vector<RevisionRow> latest_revisions_with_status(Status status, int limit = 1000) const override;
    std::vector<Id> latest_revision_ids_with_status(Status status, int limit = 100000) const override;
    std::vector<Id> candidates_without_feasibility(int limit = 1000) const override;
    std::vector<RevisionHead> latest_revision_heads() const override;
    std::vector<RevisionHead> latest_revision_heads(const std::set<std::string>& recipe_ids) const override;
    std::vector<SupersededRevision> superseded_open_revisions(int limit = 1000) const override;
    std::map<std::string, std::pair<Id, Status>> latest_revisions() const override;
    RecipePage list_recipes(const RecipeFilter& filter) const override;
    std::map<Status, std::int64_t> recipes_by_status() const override;
    std::optional<RecipeDetail> recipe(const std::string& id) const override;
    std::optional<RevisionRow> revision(Id revision_id) const override;
    std::optional<RevisionRow> current_default(const std::string& slot = "default") const override;
    std::optional<Status> status_of(Id revision_id) const override;

    // ---- EvidenceLedger ----
    Id add_evidence(const EvidenceRow& row) override;
    Id add_verdict(const VerdictRow& row) override;
    std::vector<Id> add_verdicts(const std::vector<VerdictRow>& rows) override;
    QualificationRecorded record_qualification(const QualificationRecord& record) override;

    // ---- EngineLedger ----
    Id record_engine_start(const EngineRow& row) override;
    void record_engine_health(Id engine_id, const std::string& health) override;
    void record_engine_stop(Id engine_id, std::optional<std::int64_t> exit_code) override;
    std::vector<EngineRow> running_engines() const override;

    // ---- SettingsLedger ----
    void set_pin(const PromotionPin& pin) override;
    bool clear_pin(const std::string& actor) override;
    void set_freeze(const PromotionFreeze& freeze) override;
    bool clear_freeze(const std::string& actor) override;
    void set_last_promotion(const LastPromotion& last, const std::string& actor) override;
    std::optional<PromotionPin> pin() const override;
    std::optional<PromotionFreeze> freeze() const override;
    std::optional<LastPromotion> last_promotion() const override;

    // ---- Feed ----
    Id append_event(const std::string& kind, const std::string& subject, const std::string& message,
                    const nlohmann::json& data = nlohmann::json::object()) override;
    FeedCursor feed_head() const override;
    std::vector<FeedItem> feed_since(FeedCursor cursor, int limit = 100) const override;

private:
    // What tests check the ledger with (status cache against the transitions, integrity, raw
    // settings): state/inspection.hpp, not the production interface.
    friend class Inspection;
    std::map<Id, Status> statuses() const;
    std::map<Id, Status> statuses_from_ledger() const;
    std::string integrity_check() const;
    std::vector<TransitionRow> transitions_since(Id cursor, int limit = 1000) const;
    void set_setting(const std::string& key, const nlohmann::json& value, const std::string& actor);
    std::optional<nlohmann::json> setting(const std::string& key) const;
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
