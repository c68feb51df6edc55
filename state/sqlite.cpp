#include "state/sqlite.hpp"

#include <sqlite3.h>

#include <spdlog/spdlog.h>

namespace anvil::state {

namespace {
std::string advice(int code) {
    switch (code & 0xff) {
        case SQLITE_FULL: return " (the disk or the database size limit is full: free space; reads still work)";
        case SQLITE_READONLY: return " (the file or its directory is read-only: fix permissions or the mount; reads still work)";
        case SQLITE_BUSY: return " (another process holds the write lock: is a second anvild running on this data directory?)";
        case SQLITE_CORRUPT: case SQLITE_NOTADB: return " (the file is damaged or not an anvil state database)";
        case SQLITE_CANTOPEN: return " (check that the directory exists and is writable)";
        case SQLITE_IOERR: return " (an I/O error: check the disk)";
        default: return "";
    }
}
}  // namespace

namespace {
// Process-wide settings, before SQLite initialises (sqlite3_open_v2 does that): no memory
// statistics, whose global mutex every allocation took (callgrind: ~8% of a guarded transition's
// instructions went to that mutex and its counters). Nothing here reads sqlite3_memory_used, and
// this library is the process's only user of SQLite; a refusal (already initialised) is harmless.
void configure_sqlite_once() {
    static const bool configured = [] { return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0) == SQLITE_OK; }();
    (void)configured;
}
}  // namespace

Connection::Connection(const std::filesystem::path& path, OpenMode mode) : path_(path) {
    configure_sqlite_once();
    int flags = mode == OpenMode::read_write_create ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY;
    std::string name = path.string();
    if (mode == OpenMode::immutable) {
        flags |= SQLITE_OPEN_URI;
        name = "file:" + name + "?immutable=1";
    }
    const int rc = sqlite3_open_v2(name.c_str(), &db_, flags | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) {
        std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
        sqlite3_close(db_);
        db_ = nullptr;
        throw StoreError("state database " + path.string() + ": cannot open: " + message + advice(rc), rc & 0xff);
    }
    sqlite3_extended_result_codes(db_, 1);
    sqlite3_busy_timeout(db_, 5000);
    // Reads through a memory map and a page cache larger than the listing tables: without them
    // every list query re-reads its pages with pread (measured: 12 ms p50 over 10,000 recipes).
    try {
        exec("PRAGMA mmap_size = 268435456; PRAGMA cache_size = -32768; PRAGMA temp_store = MEMORY;");
    } catch (...) {
        // A constructor that throws runs no destructor: close here, or the handle leaks.
        sqlite3_close_v2(db_);
        db_ = nullptr;
        throw;
    }
}

Connection::~Connection() {
    if (db_) sqlite3_close_v2(db_);
}

bool lasting_write_failure(int sqlite_code) {
    switch (sqlite_code & 0xff) {
        case SQLITE_FULL:
        case SQLITE_IOERR:
        case SQLITE_READONLY:
        case SQLITE_CANTOPEN:
        case SQLITE_PERM: return true;
        default: return false;
    }
}

void Connection::fail(const std::string& what) const {
    const int code = sqlite3_extended_errcode(db_);
    throw StoreError("state database " + path_.string() + ": " + what + ": " + sqlite3_errmsg(db_) + advice(code), code & 0xff);
}

void Connection::exec(std::string_view sql) {
    std::string text(sql);
    char* error = nullptr;
    if (sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
        std::string message = error ? error : "unknown error";
        sqlite3_free(error);
        const int code = sqlite3_extended_errcode(db_);
        throw StoreError("state database " + path_.string() + ": " + message + advice(code), code & 0xff);
    }
}

std::int64_t Connection::last_insert_id() const { return sqlite3_last_insert_rowid(db_); }
int Connection::changes() const { return sqlite3_changes(db_); }

Statement::Statement(Connection& db, std::string_view sql) : db_(&db) {
    if (sqlite3_prepare_v3(db.handle(), sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr) != SQLITE_OK)
        db.fail("preparing `" + std::string(sql.substr(0, 60)) + "`");
}

Statement::~Statement() {
    if (stmt_) sqlite3_finalize(stmt_);
}

Statement::Statement(Statement&& other) noexcept : db_(other.db_), stmt_(other.stmt_) { other.stmt_ = nullptr; }

Statement& Statement::operator=(Statement&& other) noexcept {
    if (this != &other) {
        if (stmt_) sqlite3_finalize(stmt_);
        db_ = other.db_;
        stmt_ = other.stmt_;
        other.stmt_ = nullptr;
    }
    return *this;
}

Statement& Statement::bind(int index, std::int64_t value) {
    if (sqlite3_bind_int64(stmt_, index, value) != SQLITE_OK) db_->fail("binding parameter " + std::to_string(index));
    return *this;
}

Statement& Statement::bind(int index, double value) {
    if (sqlite3_bind_double(stmt_, index, value) != SQLITE_OK) db_->fail("binding parameter " + std::to_string(index));
    return *this;
}

Statement& Statement::bind(int index, std::string_view value) {
    if (sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT) != SQLITE_OK)
        db_->fail("binding parameter " + std::to_string(index));
    return *this;
}

Statement& Statement::bind_static(int index, std::string_view value) {
    if (sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()), SQLITE_STATIC) != SQLITE_OK)
        db_->fail("binding parameter " + std::to_string(index));
    return *this;
}

Statement& Statement::bind(int index, const SqlValue& value) {
    if (std::holds_alternative<std::int64_t>(value)) return bind(index, std::get<std::int64_t>(value));
    if (std::holds_alternative<double>(value)) return bind(index, std::get<double>(value));
    if (std::holds_alternative<std::string>(value)) return bind(index, std::string_view(std::get<std::string>(value)));
    return bind_null(index);
}

Statement& Statement::bind_null(int index) {
    if (sqlite3_bind_null(stmt_, index) != SQLITE_OK) db_->fail("binding parameter " + std::to_string(index));
    return *this;
}

bool Statement::step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    std::string sql = sqlite3_sql(stmt_) ? sqlite3_sql(stmt_) : "";
    sqlite3_reset(stmt_);
    db_->fail("running `" + sql.substr(0, 60) + "`");
}

void Statement::run() {
    while (step()) {
    }
    reset();
}

void Statement::reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
}

bool Statement::is_null(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }
std::int64_t Statement::integer(int column) const { return sqlite3_column_int64(stmt_, column); }
double Statement::real(int column) const { return sqlite3_column_double(stmt_, column); }

std::string Statement::text(int column) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
    return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, column))) : std::string();
}

std::string_view Statement::text_view(int column) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
    return p ? std::string_view(p, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, column))) : std::string_view();
}

std::optional<std::string> Statement::optional_text(int column) const {
    if (is_null(column)) return std::nullopt;
    return text(column);
}

SqlValue Statement::value(int column) const {
    switch (sqlite3_column_type(stmt_, column)) {
        case SQLITE_INTEGER: return integer(column);
        case SQLITE_FLOAT: return real(column);
        case SQLITE_NULL: return std::monostate{};
        default: return text(column);
    }
}

Transaction::Transaction(Connection& db) : db_(db) { db_.exec("BEGIN IMMEDIATE"); }

Transaction::~Transaction() {
    if (done_) return;
    // A full disk or an I/O error rolls the transaction back by itself: a ROLLBACK then would
    // only fail again ("no transaction is active") and say so in the log at every attempt.
    if (sqlite3_get_autocommit(db_.db_)) return;
    try {
        db_.exec("ROLLBACK");
    } catch (const std::exception& e) {
        spdlog::error("{}", e.what());
    }
}

void Transaction::commit() {
    db_.exec("COMMIT");
    done_ = true;
    db_.commits_.fetch_add(1, std::memory_order_release);
}

}  // namespace anvil::state
