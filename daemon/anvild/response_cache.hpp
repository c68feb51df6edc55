// Bodies of read-only API answers computed from the ledger, each kept with the store's write
// generation it was computed at and served only while the generation has not moved: a list page
// costs two indexed queries and a JSON rendering, a hit costs one lookup under a shared lock.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>

namespace anvil::daemon {

class ResponseCache {
public:
    explicit ResponseCache(std::size_t capacity) : capacity_(capacity) {}

    // The body stored under `key` at exactly `generation`, or null.
    std::shared_ptr<const std::string> find(const std::string& key, std::uint64_t generation) const {
        std::shared_lock lock(mutex_);
        auto it = entries_.find(key);
        if (it == entries_.end() || it->second.generation != generation) return nullptr;
        return it->second.body;
    }

    // Callers store only what they read while the generation stayed at `generation` (read it
    // before the query and again after): a body read across a commit is never kept.
    void store(const std::string& key, std::uint64_t generation, std::string body) {
        std::unique_lock lock(mutex_);
        if (entries_.size() >= capacity_ && !entries_.count(key)) {
            // Entries of an older generation can never be served again; if every entry is current,
            // start over rather than track recency for a cache this cheap to refill.
            std::erase_if(entries_, [&](const auto& entry) { return entry.second.generation != generation; });
            if (entries_.size() >= capacity_) entries_.clear();
        }
        entries_[key] = {generation, std::make_shared<const std::string>(std::move(body))};
    }

    std::size_t size() const {
        std::shared_lock lock(mutex_);
        return entries_.size();
    }

private:
    struct Entry {
        std::uint64_t generation = 0;
        std::shared_ptr<const std::string> body;
    };
    std::size_t capacity_;
    mutable std::shared_mutex mutex_;
    std::unordered_map<std::string, Entry> entries_;
};

}  // namespace anvil::daemon
