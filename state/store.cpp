// The store's opening: the writer connection (WAL, pragmas, migrations), the read-only fallback with its
// reason, and the pieces the store_*.cpp files share.
#include "state/store_impl.hpp"
#include "support/text.hpp"

#include <sqlite3.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>

#include <spdlog/spdlog.h>

#include "state/migrations.hpp"

namespace anvil::state {

using nlohmann::json;
using namespace store_detail;

namespace store_detail {

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

}  // namespace store_detail

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
}  // namespace

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

std::uint64_t Store::write_generation() const { return impl_->writer ? impl_->writer->conn.commits() : 0; }

std::string Store::integrity_check() const {
    auto r = impl_->reader();
    auto& s = r.prepare("PRAGMA integrity_check");
    std::string out;
    while (s.step()) out += (out.empty() ? "" : "\n") + s.text(0);
    s.reset();
    return out;
}

void Store::note_write_failure(const StoreError& e) const {
    if (!lasting_write_failure(e.sqlite_code)) return;
    std::lock_guard lock(impl_->failures_mutex);
    ++impl_->failures.count;
    impl_->failures.sqlite_code = e.sqlite_code;
    impl_->failures.message = e.what();
}

void Store::use_clock(std::function<std::chrono::system_clock::time_point()> clock) {
    if (clock) impl_->clock = std::move(clock);
    else impl_->clock = [] { return std::chrono::system_clock::now(); };
}

Store::WriteFailures Store::write_failures() const {
    std::lock_guard lock(impl_->failures_mutex);
    return impl_->failures;
}

}  // namespace anvil::state
