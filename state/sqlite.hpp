// A thin RAII layer over the SQLite C API: connections, prepared statements with typed binding,
// and errors that carry the database path and the statement that failed.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>

struct sqlite3;
struct sqlite3_stmt;

namespace anvil::state {

struct StoreError : std::runtime_error {
    StoreError(const std::string& message, int code = 0) : std::runtime_error(message), sqlite_code(code) {}
    int sqlite_code;  // primary SQLite result code, 0 when not from SQLite
};

// Whether a write failed for a cause that lasts until someone acts (a full disk, a read-only or
// failing device, a file that cannot be opened), as against a busy or locked database.
bool lasting_write_failure(int sqlite_code);

using SqlValue = std::variant<std::monostate, std::int64_t, double, std::string>;

class Connection;

class Statement {
public:
    Statement() = default;
    Statement(Connection& db, std::string_view sql);
    ~Statement();
    Statement(Statement&& other) noexcept;
    Statement& operator=(Statement&& other) noexcept;
    Statement(const Statement&) = delete;
    Statement& operator=(const Statement&) = delete;

    // Binding is 1-based, as in SQLite. Returns *this so calls chain.
    Statement& bind(int index, std::int64_t value);
    Statement& bind(int index, int value) { return bind(index, static_cast<std::int64_t>(value)); }
    Statement& bind(int index, double value);
    Statement& bind(int index, std::string_view value);
    Statement& bind(int index, const std::string& value) { return bind(index, std::string_view(value)); }
    Statement& bind(int index, const char* value) { return bind(index, std::string_view(value)); }
    Statement& bind(int index, const SqlValue& value);
    // Binds text without copying it: the caller keeps `value` alive until the statement has run
    // (or is rebound). For hot paths whose strings plainly outlive the step; never a temporary.
    Statement& bind_static(int index, std::string_view value);
    Statement& bind_null(int index);
    template <typename T>
    Statement& bind(int index, const std::optional<T>& value) {
        return value ? bind(index, *value) : bind_null(index);
    }

    // Advances; true while a row is available. Throws StoreError on failure.
    bool step();
    // Runs a statement that returns no rows; resets it for reuse.
    void run();
    void reset();

    bool is_null(int column) const;
    std::int64_t integer(int column) const;
    double real(int column) const;
    std::string text(int column) const;
    // The column's text without a copy, valid until the next step or reset.
    std::string_view text_view(int column) const;
    std::optional<std::string> optional_text(int column) const;
    SqlValue value(int column) const;

private:
    Connection* db_ = nullptr;
    sqlite3_stmt* stmt_ = nullptr;
};

// immutable: read-only for a file on a read-only mount, where SQLite cannot even create its
// shared-memory index; it must then see no concurrent writer, which a read-only mount guarantees.
enum class OpenMode { read_write_create, read_only, immutable };

class Connection {
public:
    Connection(const std::filesystem::path& path, OpenMode mode);
    ~Connection();
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;

    void exec(std::string_view sql);
    std::int64_t last_insert_id() const;
    int changes() const;
    sqlite3* handle() const { return db_; }
    const std::filesystem::path& path() const { return path_; }
    // "state database PATH: WHAT: sqlite message", with advice for the common causes.
    [[noreturn]] void fail(const std::string& what) const;
    // Transactions committed through Transaction on this connection. Read caches key on it: a
    // value read while it did not change is still what the database holds.
    std::uint64_t commits() const { return commits_.load(std::memory_order_acquire); }

private:
    friend class Transaction;
    sqlite3* db_ = nullptr;
    std::filesystem::path path_;
    std::atomic<std::uint64_t> commits_{0};
};

// BEGIN IMMEDIATE … COMMIT, rolled back unless commit() ran.
class Transaction {
public:
    explicit Transaction(Connection& db);
    ~Transaction();
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    void commit();

private:
    Connection& db_;
    bool done_ = false;
};

}  // namespace anvil::state
