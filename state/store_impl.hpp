// Inside the store, shared by state/store*.cpp and nothing else: the pooled connections, the writer's
// pieces of transactions, the write helper, and the conversions between rows and columns.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include <sqlite3.h>

#include "state/store.hpp"
#include "support/clock.hpp"

namespace anvil::state {

namespace store_detail {

// The same text nlohmann writes ("[]", "[1,2,3]"), without building a json value per row.
std::string ids_json(const std::vector<Id>& ids);
std::vector<Id> parse_ids(const std::string& text);
std::vector<std::string> parse_strings(const std::string& text);
SqlValue to_sql(const std::optional<registry::Number>& n);
std::optional<registry::Number> to_number(const SqlValue& v);
// Throws on a status this anvil does not know: the file was written by something else.
Status status_from(const std::string& text);
// Columns: id, revision_id, from_status, to_status, reason, evidence_ids, verdict_ids, commit_id,
// actor, created_at.
TransitionRow read_transition(const Statement& s);

}  // namespace store_detail

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
    // What every row's time is read from (Store::use_clock); the system's by default.
    std::function<std::chrono::system_clock::time_point()> clock = [] { return std::chrono::system_clock::now(); };
    std::string now() const { return support::format_utc(clock(), support::Precision::milliseconds); }
    mutable std::mutex failures_mutex;
    Store::WriteFailures failures;  // under failures_mutex
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

    // The feed's record of a setting's change: what the key holds now (null once cleared) and who changed it.
    void setting_event(const std::string& key, const std::string& message, const nlohmann::json& value, const std::string& actor,
                       const std::string& now);
    Id insert_event(const std::string& kind, const std::string& subject, const std::string& message, const nlohmann::json& data,
                    const std::string& now);
    Id insert_evidence(const EvidenceRow& row);
    // A feasibility verdict also becomes the recipe's summary verdict when it judges the newest revision.
    Id insert_verdict(const VerdictRow& row);

    // The ledger row, the status cache and the recipe summary: three writes, one transaction (the
    // caller's). Every lookup goes through a primary key.
    Id insert_transition(Id revision_id, const std::string& recipe_id, const std::string& slot, std::optional<Status> from,
                         const TransitionRequest& r, const std::string& now);
    // Gates with a `pass` verdict for this revision whose evidence is all local, as the writer sees
    // them: rows written earlier in the same transaction count.
    std::set<std::string> gates_passed_locally(Id revision_id);
    // `now` is the transaction's timestamp: every transition of one batch is written at one time.
    Id guarded_transition(const TransitionRequest& r, const std::string& now);

    // The recipes row's summary columns and search index follow the newest revision.
    void make_newest(const RevisionInput& revision, Id revision_id);
    // Bytes already recorded as a revision that is not the newest: the registry went back to them.
    void return_to_newest(const RevisionInput& revision, Id revision_id, const std::string& actor);
    Store::Ingested ingest(Id source_id, const RevisionInput& revision, const std::string& actor);
};

template <typename Body>
auto Store::write(std::string_view what, Body&& body) {
    try {
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
    } catch (const StoreError& e) {
        note_write_failure(e);
        throw;
    }
}

}  // namespace anvil::state
