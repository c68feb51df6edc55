// Rows of the ledger as the store reads and writes them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "registry/evidence_variable.hpp"
#include "state/lifecycle.hpp"

namespace anvil::state {

using Id = std::int64_t;

enum class EvidenceClass { local, external_prior };
std::string_view to_string(EvidenceClass c);

struct EvidenceRow {
    Id id = 0;
    Id revision_id = 0;
    std::string metric;
    std::optional<registry::Number> min;  // a point value has min == max
    std::optional<registry::Number> max;
    std::string unit;
    registry::EvidenceStatus status = registry::EvidenceStatus::measured;
    EvidenceClass evidence_class = EvidenceClass::local;
    std::string source;
    std::string observed_at;
    std::optional<std::string> receipt_sha256;
    std::optional<std::string> receipt_path;
    std::string created_at;
    // The revision this measurement was compared against (the default's quality samples), when it was.
    std::optional<Id> control_revision_id;
};

enum class GateResult { pass, fail, unknown };
std::string_view to_string(GateResult r);

struct VerdictRow {
    Id id = 0;
    Id revision_id = 0;
    std::string gate;  // "feasibility", "identity", "smoke", …
    GateResult result = GateResult::unknown;
    std::optional<std::string> verdict_class;  // e.g. "proven-infeasible"
    std::vector<std::string> reasons;
    std::vector<Id> evidence_ids;
    std::string created_at;
};

struct TransitionRequest {
    Id revision_id = 0;
    Status to = Status::candidate;
    std::string reason;
    std::string actor;
    std::vector<Id> evidence_ids;
    std::vector<Id> verdict_ids;
    std::optional<std::string> commit_id;
};

// One qualification's outcome, written in one transaction: its evidence, its verdicts citing that
// evidence, and the transition that closes it citing both. Nothing of it lands if any part is refused.
struct QualificationVerdict {
    std::string gate;
    GateResult result = GateResult::unknown;
    std::optional<std::string> verdict_class;
    std::vector<std::string> reasons;
    std::vector<std::size_t> evidence;  // positions in QualificationRecord::evidence
};

// An entry of the event feed (Store::append_event's arguments).
struct EventInput {
    std::string kind;
    std::string subject;
    std::string message;
};

struct QualificationRecord {
    Id revision_id = 0;
    std::vector<EvidenceRow> evidence;  // each row's revision_id is ignored: it is the record's
    std::vector<QualificationVerdict> verdicts;
    Status to = Status::failed;  // validated, failed or retired
    std::string reason;
    std::string actor = "reconciler";
    std::optional<EventInput> event;  // written in the same transaction, when set
};

struct QualificationRecorded {
    std::vector<Id> evidence_ids;  // in the order of QualificationRecord::evidence
    std::vector<Id> verdict_ids;
    Id transition_id = 0;
};

struct TransitionRow {
    Id id = 0;
    Id revision_id = 0;
    std::optional<Status> from;
    Status to = Status::candidate;
    std::string reason;
    std::vector<Id> evidence_ids;
    std::vector<Id> verdict_ids;
    std::optional<std::string> commit_id;
    std::string actor;
    std::string created_at;
};

struct RevisionRow {
    Id id = 0;
    std::string recipe_id;
    std::string sha256;
    std::string source_url;
    std::string commit_id;
    std::string path;
    std::string blob_id;
    std::string engine;
    std::string hardware_id;
    std::string launch_kind;
    std::string serving_slot;
    bool pinned = false;
    std::vector<std::string> unpinned_reasons;
    Status status = Status::candidate;
    std::string created_at;
    nlohmann::json document;
};

// A recipe revision as the ledger records it: fields the registry already read out of the document,
// and the document itself as text. The store keeps the text and never reads fields back out of it.
struct RevisionInput {
    std::string recipe_id;
    std::string sha256;     // of the document's bytes: one revision per content
    std::string commit_id;  // empty when it came from no commit
    std::string path;
    std::string blob_id;
    std::string engine;
    std::string hardware_id;
    std::string launch_kind;
    std::string serving_slot = "default";
    bool pinned = false;
    std::vector<std::string> unpinned_reasons;
    std::string description;  // searched with the id (its first 4 KiB)
    std::string document;     // JSON text, stored once
};

struct EngineRow {
    Id id = 0;
    std::optional<Id> revision_id;
    std::string driver;  // embedded | process | container | slurm-embedded | slurm-process | slurm-container
    std::optional<std::int64_t> pid;
    std::optional<std::string> container_id;
    std::optional<std::string> job_id;  // the Slurm job running it
    std::optional<std::int64_t> port;
    std::string started_at;
    std::string health;  // starting | healthy | unhealthy | exited
    std::string health_at;
    std::optional<std::string> stopped_at;
    std::optional<std::int64_t> exit_code;
    std::string engine_key;         // the driver's engine id: finds the engine again after a restart
    std::string role = "serving";   // serving | qualification
};

// A position in the event feed. Transitions are events too, but they live only in the ledger (one
// row each, not two); the feed merges them with the events table, so its cursor is the pair of
// high-water marks, written "<transition id>.<event id>".
struct FeedCursor {
    Id transition = 0;
    Id event = 0;
    std::string str() const { return std::to_string(transition) + "." + std::to_string(event); }
    static std::optional<FeedCursor> parse(const std::string& text);
};

struct FeedItem {
    FeedCursor cursor;  // pass it back to read what came after this item
    std::string kind;   // "transition", or the event's own kind
    std::string subject;
    std::string message;
    nlohmann::json data;
    std::string created_at;
};

// One recipe in a listing: its newest revision and that revision's status.
struct RecipeSummary {
    std::string id;
    Id revision_id = 0;
    std::string status;
    std::string engine;
    std::string hardware_id;
    bool pinned = false;
    std::optional<std::string> verdict;
};

// The orders a recipe list can take; ties (and `id` itself) go by recipe id.
enum class RecipeOrder { id, status, engine, hardware, verdict };
std::optional<RecipeOrder> parse_recipe_order(std::string_view text);  // "id" | "status" | "engine" | "hardware" | "verdict"

struct RecipeFilter {
    std::optional<std::string> status;
    std::optional<std::string> engine;
    std::optional<std::string> hardware;
    std::optional<bool> pinned;
    std::optional<std::string> verdict;
    std::optional<std::string> text;  // substring of id or description, case-insensitive
    RecipeOrder order = RecipeOrder::id;
    bool descending = false;
    std::int64_t limit = 50;
    std::int64_t offset = 0;
};

struct RecipePage {
    std::vector<RecipeSummary> items;
    std::int64_t total = 0;
};

struct RecipeDetail {
    std::string id;
    std::vector<RevisionRow> revisions;  // newest first
    std::vector<EvidenceRow> evidence;
    std::vector<VerdictRow> verdicts;
    std::vector<TransitionRow> history;  // oldest first
};

// The newest local measurement of each metric of one revision (its lower bound), as promotion
// compares them.
std::map<std::string, double> local_measurements(const RecipeDetail& detail, Id revision_id);

// The newest revision of a recipe without its document: what a pass compares with the registry.
struct RevisionHead {
    Id revision_id = 0;
    std::string recipe_id;
    std::string sha256;
    std::string source_url;  // empty when it came from no recorded source
    std::string path;
    Status status = Status::candidate;
};

// A revision still open (candidate, qualifying, validated or failed) though its recipe has a newer one.
struct SupersededRevision {
    Id revision_id = 0;
    std::string recipe_id;
    Status status = Status::candidate;
    Id newest_revision_id = 0;
};

// UTC, ISO 8601 with milliseconds: "2026-11-30T06:14:00.123Z". Forwards to support::utc_now
// (support/clock.hpp), the one clock format; kept so the ledger's many callers read as before.
std::string now_iso8601();

}  // namespace anvil::state
