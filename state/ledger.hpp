// The ledger by aggregate: what a part of anvild may read and write, as five narrow interfaces over
// the one database (state::Store implements them all and owns the one write() every transaction
// goes through). A part that records engines sees EngineLedger and nothing of revisions; the
// controller, which acts on all of them, takes the Store.
//   RevisionLedger  recipes and their revisions, guarded transitions, promotion
//   EvidenceLedger  measurements and verdicts, and a qualification's record in one transaction
//   EngineLedger    engines started, their health, their end
//   SettingsLedger  the operator's pin and freeze, the last promotion
//   Feed            events, and the feed of transitions and events the API pages through
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "state/records.hpp"
#include "state/revision_input.hpp"
#include "state/settings.hpp"

namespace anvil::registry {
struct Document;
struct SyncReport;
}  // namespace anvil::registry

namespace anvil::state {

class RevisionLedger {
public:
    struct Ingested {
        Id revision_id = 0;
        bool created = false;  // false: these exact bytes were already a revision of this recipe
    };
    struct Promotion {
        Id promoted_transition = 0;
        std::optional<Id> retired_revision;
        std::optional<Id> retired_transition;
    };

    // Records a valid recipe document as a revision (a new one starts as `candidate`; a new
    // revision of a promoted recipe does not inherit its status). Bytes that are already a revision
    // make it the recipe's newest again (a revert or a force-push back): the registry decides what
    // is newest, and a retired revision that returns is a candidate again.
    virtual Ingested ingest_revision(Id source_id, const RevisionInput& revision, const std::string& actor = "reconciler") = 0;
    // Every revision of one registry commit in one transaction (a span, so that a braced list of
    // document pointers still means the overload below): the commit lands whole or not at all,
    // with the sync that read it (`sync`: the commit, its mode and counts) when given.
    virtual std::vector<Ingested> ingest_revisions(Id source_id, std::span<const RevisionInput> revisions,
                                                   const std::string& actor = "reconciler", const registry::SyncReport* sync = nullptr) = 0;
    // The same from the registry's documents (each made a RevisionInput by revision_input()); only
    // valid recipe documents become revisions.
    virtual Ingested ingest_revision(Id source_id, const registry::Document& doc, const std::string& actor = "reconciler") = 0;
    virtual std::vector<Ingested> ingest_revisions(Id source_id, const std::vector<const registry::Document*>& docs,
                                                   const std::string& actor = "reconciler", const registry::SyncReport* sync = nullptr) = 0;
    // Guarded; throws TransitionRefused naming the guard that failed.
    virtual Id transition(const TransitionRequest& request) = 0;
    // Many transitions in one transaction: all or none.
    virtual std::vector<Id> transition_batch(const std::vector<TransitionRequest>& requests) = 0;
    // The old default of the slot becomes retired and this revision promoted, in one transaction.
    virtual Promotion promote(Id revision_id, const std::string& reason, const std::string& actor,
                              const std::vector<Id>& evidence_ids = {}, const std::vector<Id>& verdict_ids = {}) = 0;

    // The newest revision of each recipe whose status is `status`, by recipe id.
    virtual std::vector<RevisionRow> latest_revisions_with_status(Status status, int limit = 1000) const = 0;
    // The same, ids only (cheap over many thousands).
    virtual std::vector<Id> latest_revision_ids_with_status(Status status, int limit = 100000) const = 0;
    // Newest revisions still `candidate` with no feasibility verdict yet (a pass died before judging them).
    virtual std::vector<Id> candidates_without_feasibility(int limit = 1000) const = 0;
    // The newest revision of every recipe, without documents.
    virtual std::vector<RevisionHead> latest_revision_heads() const = 0;
    // The same for the named recipes only (those without a revision are left out), in recipe order.
    virtual std::vector<RevisionHead> latest_revision_heads(const std::set<std::string>& recipe_ids) const = 0;
    // Older revisions still open while their recipe has a newer one; the pass retires them.
    virtual std::vector<SupersededRevision> superseded_open_revisions(int limit = 1000) const = 0;
    // Every recipe id with at least one revision, and its newest revision's id and status.
    virtual std::map<std::string, std::pair<Id, Status>> latest_revisions() const = 0;
    virtual RecipePage list_recipes(const RecipeFilter& filter) const = 0;
    // How many recipes stand at each status (their newest revision's), every status present.
    virtual std::map<Status, std::int64_t> recipes_by_status() const = 0;
    virtual std::optional<RecipeDetail> recipe(const std::string& id) const = 0;
    virtual std::optional<RevisionRow> revision(Id revision_id) const = 0;
    virtual std::optional<RevisionRow> current_default(const std::string& slot = "default") const = 0;
    virtual std::optional<Status> status_of(Id revision_id) const = 0;

protected:
    ~RevisionLedger() = default;
};

class EvidenceLedger {
public:
    virtual Id add_evidence(const EvidenceRow& row) = 0;
    virtual Id add_verdict(const VerdictRow& row) = 0;
    // Many verdicts in one transaction (the feasibility of a whole registry commit).
    virtual std::vector<Id> add_verdicts(const std::vector<VerdictRow>& rows) = 0;
    // A qualification's evidence, verdicts and closing transition (to validated, failed or retired) in
    // one transaction; the guard sees the verdicts written in it. Throws TransitionRefused, leaving
    // no row behind, when the transition is refused.
    virtual QualificationRecorded record_qualification(const QualificationRecord& record) = 0;

protected:
    ~EvidenceLedger() = default;
};

class EngineLedger {
public:
    virtual Id record_engine_start(const EngineRow& row) = 0;
    virtual void record_engine_health(Id engine_id, const std::string& health) = 0;
    virtual void record_engine_stop(Id engine_id, std::optional<std::int64_t> exit_code) = 0;
    virtual std::vector<EngineRow> running_engines() const = 0;

protected:
    ~EngineLedger() = default;
};

// The promotion settings, typed (state/settings.hpp). A set is written by its actor (the pin's
// and the freeze's own); a clear says whether there was one, and writes an event only then.
class SettingsLedger {
public:
    virtual void set_pin(const PromotionPin& pin) = 0;
    virtual bool clear_pin(const std::string& actor) = 0;
    virtual void set_freeze(const PromotionFreeze& freeze) = 0;
    virtual bool clear_freeze(const std::string& actor) = 0;
    virtual void set_last_promotion(const LastPromotion& last, const std::string& actor) = 0;
    virtual std::optional<PromotionPin> pin() const = 0;
    virtual std::optional<PromotionFreeze> freeze() const = 0;
    virtual std::optional<LastPromotion> last_promotion() const = 0;

protected:
    ~SettingsLedger() = default;
};

class Feed {
public:
    virtual Id append_event(const std::string& kind, const std::string& subject, const std::string& message,
                            const nlohmann::json& data = nlohmann::json::object()) = 0;
    // The cursor after everything the feed holds now (a client that wants only what comes next).
    virtual FeedCursor feed_head() const = 0;
    // Transitions and other events, oldest first, after `cursor` (see FeedCursor).
    virtual std::vector<FeedItem> feed_since(FeedCursor cursor, int limit = 100) const = 0;

protected:
    ~Feed() = default;
};

}  // namespace anvil::state
