// A registry source kept as a bare clone under the data directory (libgit2). Documents are read
// from a commit's tree, never from a working tree, and changes between two commits come from a
// tree-to-tree diff with rename detection.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace anvil::registry {

struct SourceError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct TreeEntry {
    std::string path;
    std::string blob_id;
};

struct PathChange {
    enum class Kind { added, modified, deleted, renamed };
    Kind kind;
    std::string path;      // the path after the change (deleted: the path that went away)
    std::string old_path;  // renamed: where it was
    std::string blob_id;   // the new blob (empty for deleted)
};

// True for a URL (file://, https://, ssh://, git@…) or a local path to a git repository, bare or
// not; false for a plain directory or file, which is read from the filesystem instead.
bool is_git_location(const std::string& location);

class GitSource {
public:
    // `url`: a local path to a repository (bare or not) or a file:// URL. `ref`: a branch, tag or
    // commit id; empty means the source's HEAD. The clone lives in data_dir/sources/.
    GitSource(std::string url, std::string ref, const std::filesystem::path& data_dir);
    ~GitSource();
    GitSource(const GitSource&) = delete;
    GitSource& operator=(const GitSource&) = delete;

    const std::string& url() const { return url_; }
    const std::string& ref() const { return ref_; }
    const std::filesystem::path& clone_dir() const { return clone_dir_; }

    // Fetches from the source and returns the commit id the ref points at now. A source given as a
    // local path shares its object directory with the clone (objects/info/alternates, as `git clone
    // --shared` does) and only its refs are copied; a URL, file:// included, is fetched.
    std::string fetch();
    // Resolves the ref in the local clone without fetching.
    std::string resolve() const;

    // Every document path (see is_document_path) in the commit's tree, sorted.
    std::vector<TreeEntry> list_documents(const std::string& commit) const;
    std::string read_blob(const std::string& blob_id) const;
    // A blob's size from its object header, without reading (inflating) its content.
    std::uint64_t blob_size(const std::string& blob_id) const;
    // Document paths that differ between two commits' trees.
    std::vector<PathChange> diff(const std::string& from_commit, const std::string& to_commit) const;
    // True when `commit` has `ancestor` in its history (or equals it).
    bool descends_from(const std::string& commit, const std::string& ancestor) const;
    bool has_commit(const std::string& commit) const;

private:
    std::string sync_local();
    void share_objects_with(const std::string& objects_dir);

    struct Impl;
    std::unique_ptr<Impl> impl_;
    std::string url_;
    std::string ref_;
    std::filesystem::path clone_dir_;
    std::string shared_objects_;  // the source object directory the open clone already reads
};

}  // namespace anvil::registry
