// One configured registry source as the daemon watches it: a git repository (bare clone under the
// data directory, fetched on its poll interval or on demand) or a plain directory (read again each
// poll). Keeps the catalog current and says what changed, what went away, and why a fetch failed.
//
// One thread polls; others read the catalog, read_once(), last_error() and last_sync_at() while
// holding the mutex given to poll(). poll() does the slow work (the fetch, a full read into a copy)
// without it, and takes it only to swap the result in.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/config/config.hpp"
#include "registry/catalog.hpp"
#include "registry/git_source.hpp"

namespace anvil::daemon {

struct WatchResult {
    bool changed = false;                 // the catalog moved to a new commit (or new directory contents)
    registry::SyncReport report;
    std::vector<const registry::Document*> changed_recipes;  // usable recipes at changed paths
    std::set<std::string> removed_recipe_ids;                 // recipes no longer in the catalog
    // Every recipe id a changed path held before or holds now, usable or not: what the retire step
    // looks at again after an incremental read (a full read has it look at everything).
    std::set<std::string> touched_recipe_ids;
};

class RegistryWatch {
public:
    RegistryWatch(SourceConfig config, const std::filesystem::path& data_dir);
    ~RegistryWatch();

    const SourceConfig& config() const { return config_; }
    const registry::Catalog& catalog() const { return catalog_; }
    bool is_git() const { return git_ != nullptr; }
    bool read_once() const { return read_once_; }
    bool due(std::chrono::steady_clock::time_point now) const { return !read_once_ || now >= next_poll_; }
    const std::optional<std::string>& last_error() const { return last_error_; }
    const std::string& last_sync_at() const { return last_sync_at_; }

    // Which path owns each recipe id, as the ledger last saw it (recipe id → path): read before
    // the first poll, so a restart keeps ids with the files that had them.
    void remember_recipe_paths(const std::map<std::string, std::string>& paths);

    // Fetches (git) or re-reads (directory) and applies what changed. Never throws: a source that
    // cannot be read leaves the catalog as it was and sets last_error(). `publish` guards what
    // readers on other threads see.
    // `now` schedules the next poll (now + poll_interval); `at` is the sync's time as shown.
    WatchResult poll(std::mutex& publish, std::chrono::steady_clock::time_point now, const std::string& at);

private:
    SourceConfig config_;
    std::unique_ptr<registry::GitSource> git_;
    registry::Catalog catalog_;
    std::map<std::string, std::string> recipe_at_path_;  // path → recipe id, to see what a change removed
    std::map<std::string, std::string> remembered_owners_;  // Catalog::id_key → path, from the ledger
    bool read_once_ = false;
    std::chrono::steady_clock::time_point next_poll_{};
    std::optional<std::string> last_error_;
    std::string last_sync_at_;
};

}  // namespace anvil::daemon
