#include "daemon/controller/registry_watch.hpp"

#include <spdlog/spdlog.h>

#include "state/records.hpp"

namespace anvil::daemon {

RegistryWatch::RegistryWatch(SourceConfig config, const std::filesystem::path& data_dir)
    : config_(std::move(config)), catalog_(config_.document_limits) {
    if (registry::is_git_location(config_.url)) git_ = std::make_unique<registry::GitSource>(config_.url, config_.ref, data_dir);
}

RegistryWatch::~RegistryWatch() = default;

void RegistryWatch::remember_recipe_paths(const std::map<std::string, std::string>& paths) {
    remembered_owners_.clear();
    for (const auto& [id, path] : paths) remembered_owners_.emplace(registry::Catalog::id_key(registry::DocumentKind::recipe, id), path);
    catalog_.remember_owners(remembered_owners_);
}

WatchResult RegistryWatch::poll(std::mutex& publish, std::chrono::steady_clock::time_point now, const std::string& at) {
    WatchResult out;
    next_poll_ = now + config_.poll_interval;
    std::set<std::string> changed_paths;
    try {
        if (git_) {
            const std::string commit = git_->fetch();  // the network: never under `publish`
            if (!catalog_.full_read_reason(*git_, commit).empty()) {
                // Every document read again: into a copy, swapped in whole.
                registry::Catalog next = catalog_;
                out.report = next.apply(*git_, commit);
                std::lock_guard lock(publish);
                catalog_ = std::move(next);
            } else if (commit != catalog_.commit()) {
                // Only the paths the diff names: read and parsed outside `publish` (only this thread
                // changes catalog_), then applied under it, a few map updates.
                registry::CatalogChanges changes = catalog_.read_changes(*git_, commit);
                std::lock_guard lock(publish);
                out.report = catalog_.apply_changes(std::move(changes));
            } else {
                out.report.previous_commit = out.report.commit = commit;  // unchanged
            }
            out.changed = out.report.mode != registry::SyncReport::Mode::unchanged;
            changed_paths.insert(out.report.changed_paths.begin(), out.report.changed_paths.end());
        } else {
            // A plain directory has no history: read it whole and compare document digests. Only this
            // thread writes catalog_, so reading it here needs no lock.
            auto owners = catalog_.owners();
            owners.insert(remembered_owners_.begin(), remembered_owners_.end());
            registry::Catalog fresh = registry::Catalog::from_filesystem(config_.url, owners, config_.document_limits);
            for (const auto& [path, doc] : fresh.documents()) {
                auto it = catalog_.documents().find(path);
                if (it == catalog_.documents().end() || it->second.provenance.sha256 != doc.provenance.sha256) changed_paths.insert(path);
            }
            for (const auto& [path, doc] : catalog_.documents())
                if (!fresh.documents().count(path)) changed_paths.insert(path);
            out.changed = !changed_paths.empty() || !read_once_;
            out.report.mode = read_once_ ? registry::SyncReport::Mode::incremental : registry::SyncReport::Mode::full;
            out.report.changed_paths.assign(changed_paths.begin(), changed_paths.end());
            std::lock_guard lock(publish);
            catalog_ = std::move(fresh);
        }
    } catch (const std::exception& e) {
        const std::string message = "source " + config_.name + " (" + config_.url + "): " + e.what();
        if (last_error_ != message) spdlog::error("{}; serving is left as it is", message);
        std::lock_guard lock(publish);
        last_error_ = message;
        return out;
    }
    {
        std::lock_guard lock(publish);
        last_error_.reset();
        read_once_ = true;
        last_sync_at_ = at;
    }
    if (!out.changed) return out;

    // A full read may have changed any path: consider every one.
    if (out.report.mode == registry::SyncReport::Mode::full) {
        for (const auto& [path, id] : recipe_at_path_) changed_paths.insert(path);
        for (const auto& [path, doc] : catalog_.documents()) changed_paths.insert(path);
    }
    // An owner that went away hands its id to the next file claiming it, whose own path did not
    // change: that file is new to the ledger all the same.
    std::set<std::string> heirs;
    for (const auto& path : changed_paths)
        if (auto old = recipe_at_path_.find(path); old != recipe_at_path_.end())
            if (const auto* heir = catalog_.find(registry::DocumentKind::recipe, old->second); heir && heir->provenance.path != path)
                heirs.insert(heir->provenance.path);
    changed_paths.insert(heirs.begin(), heirs.end());
    for (const auto& path : changed_paths) {
        if (auto old = recipe_at_path_.find(path); old != recipe_at_path_.end()) {
            out.touched_recipe_ids.insert(old->second);
            if (!catalog_.find(registry::DocumentKind::recipe, old->second)) out.removed_recipe_ids.insert(old->second);
            recipe_at_path_.erase(old);
        }
        auto it = catalog_.documents().find(path);
        if (it == catalog_.documents().end()) continue;
        const registry::Document& doc = it->second;
        if (doc.kind == registry::DocumentKind::recipe && !doc.id.empty()) out.touched_recipe_ids.insert(doc.id);
        if (doc.kind != registry::DocumentKind::recipe || !catalog_.usable(doc)) continue;
        recipe_at_path_[path] = doc.id;
        out.changed_recipes.push_back(&doc);
        out.removed_recipe_ids.erase(doc.id);
    }
    return out;
}

}  // namespace anvil::daemon
