// The documents of one registry source at one commit, kept current incrementally: a new commit
// re-reads only the paths its diff names; a rewound or force-pushed ref is read again in full.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "registry/document.hpp"
#include "registry/git_source.hpp"

namespace anvil::registry {

struct SyncReport {
    enum class Mode { unchanged, full, incremental };
    Mode mode = Mode::unchanged;
    std::string previous_commit;
    std::string commit;
    std::string full_reason;  // why everything was read: first read, ref rewound, commit gone
    std::size_t added = 0, modified = 0, deleted = 0, renamed = 0;
    std::vector<std::string> changed_paths;  // every path whose document appeared, changed or went away
};
std::string_view to_string(SyncReport::Mode mode);

// An incremental step from one commit to the next, read but not yet applied: what the diff
// names, each document parsed. Read without touching the catalog (Catalog::read_changes), so a
// caller that publishes the catalog to other threads does the reading outside its lock and holds
// the lock only to apply.
struct CatalogChanges {
    std::string source_url;
    std::string commit;
    SyncReport report;  // mode incremental, counts and changed paths
    struct Step {
        std::string erase;              // a path that goes away (deleted, or a rename's old path), or empty
        std::optional<Document> put;    // the document at a path that appeared, changed or was renamed to
    };
    std::vector<Step> steps;  // in the diff's order: ownership of ids follows arrival
};

class Catalog {
public:
    explicit Catalog(DocumentLimits limits = {}) : limits_(limits) {}

    // Fetches the source and applies what changed since the last sync.
    SyncReport sync(GitSource& source);
    // Brings the catalog to `commit` of an already fetched source.
    SyncReport apply(const GitSource& source, const std::string& commit);
    // Why apply(source, commit) would read every document again (first read, ref rewound, previous
    // commit gone), or empty when it reads only what the diff names. Lets a caller that publishes
    // the catalog to other threads apply a full read to a copy instead of in place.
    std::string full_read_reason(const GitSource& source, const std::string& commit) const;
    // The incremental step to `commit` (full_read_reason must be empty), read and parsed, and its
    // application: apply(source, commit) is the two in one.
    CatalogChanges read_changes(const GitSource& source, const std::string& commit) const;
    SyncReport apply_changes(CatalogChanges changes);
    // Reads a plain directory (every document path below it) or one file of any name, outside git.
    // `owners` keeps ids with the paths that had them (see owners()).
    static Catalog from_filesystem(const std::filesystem::path& root, const std::map<std::string, std::string>& owners = {},
                                   DocumentLimits limits = {});

    // An id stays with the path that had it first: a newcomer claiming it is a duplicate, whatever
    // its path, until the owner goes away. Keys are "<kind>:<id>" (id_key), values paths.
    std::map<std::string, std::string> owners() const;
    // Owners known from elsewhere (the ledger's path for each recipe), honoured when the catalog is
    // read in full and this catalog does not know the id (first read after a restart). A rebuild
    // after a force-push keeps this catalog's own owners first.
    void remember_owners(std::map<std::string, std::string> owners) { remembered_owners_ = std::move(owners); }
    static std::string id_key(DocumentKind kind, const std::string& id);

    const std::string& commit() const { return commit_; }
    // By path; a path that is not UTF-8 is keyed (and reported) with U+FFFD for its bad bytes.
    const std::map<std::string, Document>& documents() const { return documents_; }
    std::size_t size() const { return documents_.size(); }

    // The path that owns this document's id (it had it first), if this document is a duplicate.
    std::optional<std::string> duplicate_of(const Document& doc) const;
    // Field errors plus a duplicate-id error, formatted one per line.
    std::vector<std::string> problems(const Document& doc) const;
    bool usable(const Document& doc) const { return doc.valid() && !duplicate_of(doc); }
    const Document* find(DocumentKind kind, const std::string& id) const;

private:
    void put(Document doc);
    // Puts a whole read (in path order), each id's known owner first.
    void put_all(std::vector<Document> docs, const std::map<std::string, std::string>& owners);
    void erase(const std::string& path);
    static std::string id_key(const Document& doc);

    DocumentLimits limits_;
    std::string source_url_;
    std::string commit_;
    std::map<std::string, Document> documents_;                  // by path
    std::map<std::string, std::vector<std::string>> claims_;     // kind:id → paths defining it, the owner first, then in arrival order
    std::map<std::string, std::string> remembered_owners_;       // kind:id → path, from outside (see remember_owners)
};

}  // namespace anvil::registry
