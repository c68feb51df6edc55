#include "registry/catalog.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "support/utf8.hpp"

namespace anvil::registry {

std::string_view to_string(SyncReport::Mode mode) {
    switch (mode) {
        case SyncReport::Mode::unchanged: return "unchanged";
        case SyncReport::Mode::full: return "full";
        case SyncReport::Mode::incremental: return "incremental";
    }
    return "unchanged";
}

std::string Catalog::id_key(DocumentKind kind, const std::string& id) {
    return std::string(to_string(kind)) + ":" + id;
}

std::string Catalog::id_key(const Document& doc) { return id_key(doc.kind, doc.id); }

void Catalog::put(Document doc) {
    // A changed document that keeps its id keeps its place among the id's claimants: an owner
    // edited in place stays the owner.
    if (auto old = documents_.find(doc.provenance.path); old != documents_.end() && !doc.id.empty() && old->second.id == doc.id &&
                                                          old->second.kind == doc.kind) {
        old->second = std::move(doc);
        return;
    }
    erase(doc.provenance.path);
    if (!doc.id.empty()) claims_[id_key(doc)].push_back(doc.provenance.path);
    std::string path = doc.provenance.path;
    documents_.emplace(std::move(path), std::move(doc));
}

void Catalog::put_all(std::vector<Document> docs, const std::map<std::string, std::string>& owners) {
    std::sort(docs.begin(), docs.end(), [](const Document& a, const Document& b) { return a.provenance.path < b.provenance.path; });
    // Known owners first, so a newcomer whose path sorts before the owner's cannot take its id.
    auto owns = [&](const Document& doc) {
        if (doc.id.empty()) return false;
        auto it = owners.find(id_key(doc));
        return it != owners.end() && it->second == doc.provenance.path;
    };
    std::stable_partition(docs.begin(), docs.end(), owns);
    for (auto& doc : docs) put(std::move(doc));
}

void Catalog::erase(const std::string& raw_path) {
    const std::string path = support::to_valid_utf8(raw_path);  // as parse_document keys it
    auto it = documents_.find(path);
    if (it == documents_.end()) return;
    if (!it->second.id.empty()) {
        auto claims = claims_.find(id_key(it->second));
        if (claims != claims_.end()) {
            std::erase(claims->second, path);
            if (claims->second.empty()) claims_.erase(claims);
        }
    }
    documents_.erase(it);
}

std::map<std::string, std::string> Catalog::owners() const {
    std::map<std::string, std::string> out;
    for (const auto& [key, paths] : claims_) out.emplace(key, paths.front());
    return out;
}

std::optional<std::string> Catalog::duplicate_of(const Document& doc) const {
    if (doc.id.empty()) return std::nullopt;
    auto claims = claims_.find(id_key(doc));
    if (claims == claims_.end() || claims->second.empty()) return std::nullopt;
    const std::string& owner = claims->second.front();
    if (owner == doc.provenance.path) return std::nullopt;
    return owner;
}

std::vector<std::string> Catalog::problems(const Document& doc) const {
    auto lines = doc.error_lines();
    if (auto owner = duplicate_of(doc))
        lines.push_back(format_error(doc.provenance.path, {"/id", "an id no other " + std::string(to_string(doc.kind)) + " uses",
                                                           "\"" + doc.id + "\", already defined by " + *owner}));
    return lines;
}

const Document* Catalog::find(DocumentKind kind, const std::string& id) const {
    auto claims = claims_.find(id_key(kind, id));
    if (claims == claims_.end() || claims->second.empty()) return nullptr;
    auto it = documents_.find(claims->second.front());
    return it == documents_.end() ? nullptr : &it->second;
}

SyncReport Catalog::sync(GitSource& source) {
    return apply(source, source.fetch());
}

std::string Catalog::full_read_reason(const GitSource& source, const std::string& commit) const {
    if (commit == commit_ && source.url() == source_url_) return "";
    if (commit_.empty() || source.url() != source_url_) return "first read of " + source.url();
    if (!source.has_commit(commit_)) return "previous commit " + commit_ + " is no longer in the source";
    if (!source.descends_from(commit, commit_)) return "ref rewound or force-pushed from " + commit_.substr(0, 12) + " to " + commit.substr(0, 12);
    return "";
}

namespace {

// One document of `commit` as the catalog holds it.
Document read_document(const GitSource& source, const std::string& commit, const std::string& path, const std::string& blob_id,
                       const DocumentLimits& limits) {
    Provenance provenance{source.url(), commit, path, blob_id, ""};
    // The size from the blob's header first: an oversized blob is invalid without being inflated
    // (a 1 GiB file of one byte repeated is a few MB in the repository).
    if (const auto size = source.blob_size(blob_id); over_document_limit(size, limits))
        return oversized_document(size, std::move(provenance), limits);
    return parse_document(source.read_blob(blob_id), std::move(provenance), limits);
}

}  // namespace

CatalogChanges Catalog::read_changes(const GitSource& source, const std::string& commit) const {
    CatalogChanges out;
    out.source_url = source.url();
    out.commit = commit;
    out.report.previous_commit = commit_;
    out.report.commit = commit;
    out.report.mode = SyncReport::Mode::incremental;
    SyncReport& report = out.report;
    for (const auto& change : source.diff(commit_, commit)) {
        CatalogChanges::Step step;
        switch (change.kind) {
            case PathChange::Kind::added: ++report.added; break;
            case PathChange::Kind::modified: ++report.modified; break;
            case PathChange::Kind::deleted: ++report.deleted; break;
            case PathChange::Kind::renamed:
                ++report.renamed;
                step.erase = change.old_path;
                report.changed_paths.push_back(support::to_valid_utf8(change.old_path));
                break;
        }
        report.changed_paths.push_back(support::to_valid_utf8(change.path));
        if (change.kind == PathChange::Kind::deleted) step.erase = change.path;
        else step.put = read_document(source, commit, change.path, change.blob_id, limits_);
        out.steps.push_back(std::move(step));
    }
    return out;
}

SyncReport Catalog::apply_changes(CatalogChanges changes) {
    for (auto& step : changes.steps) {
        if (!step.erase.empty()) erase(step.erase);
        if (step.put) put(std::move(*step.put));
    }
    source_url_ = std::move(changes.source_url);
    commit_ = std::move(changes.commit);
    return std::move(changes.report);
}

SyncReport Catalog::apply(const GitSource& source, const std::string& commit) {
    SyncReport report;
    report.previous_commit = commit_;
    report.commit = commit;
    if (commit == commit_ && source.url() == source_url_) return report;
    auto read = [&](const std::string& path, const std::string& blob_id) { return read_document(source, commit, path, blob_id, limits_); };

    report.full_reason = full_read_reason(source, commit);
    if (report.full_reason.empty()) return apply_changes(read_changes(source, commit));

    if (!commit_.empty()) spdlog::warn("registry {}: {}; reading every document again", source.url(), report.full_reason);
    report.mode = SyncReport::Mode::full;
    // Ownership survives the re-read: this catalog's owners, else those remembered from outside.
    std::map<std::string, std::string> owners = this->owners();
    owners.insert(remembered_owners_.begin(), remembered_owners_.end());
    std::map<std::string, Document> previous;
    previous.swap(documents_);
    claims_.clear();
    std::vector<Document> docs;
    for (const auto& entry : source.list_documents(commit)) {
        auto old = previous.find(support::to_valid_utf8(entry.path));
        if (old == previous.end()) ++report.added;
        else if (old->second.provenance.blob_id != entry.blob_id) ++report.modified;
        if (old == previous.end() || old->second.provenance.blob_id != entry.blob_id) report.changed_paths.push_back(support::to_valid_utf8(entry.path));
        if (old != previous.end()) previous.erase(old);
        docs.push_back(read(entry.path, entry.blob_id));
    }
    put_all(std::move(docs), owners);
    for (const auto& [path, _] : previous) {
        ++report.deleted;
        report.changed_paths.push_back(path);
    }
    source_url_ = source.url();
    commit_ = commit;
    return report;
}

Catalog Catalog::from_filesystem(const std::filesystem::path& root, const std::map<std::string, std::string>& owners,
                                 DocumentLimits limits) {
    Catalog catalog(limits);
    std::vector<Document> docs;
    catalog.source_url_ = root.string();
    auto load = [&](const std::filesystem::path& file, const std::string& relative) {
        std::ifstream in(file, std::ios::binary);
        std::ostringstream bytes;
        bytes << in.rdbuf();
        if (!in && !in.eof()) throw SourceError(file.string() + ": cannot read");
        docs.push_back(parse_document(bytes.str(), Provenance{root.string(), "", relative, "", ""}, limits));
    };
    std::error_code ec;
    if (std::filesystem::is_regular_file(root, ec)) {
        load(root, root.string());
        catalog.put_all(std::move(docs), owners);
        return catalog;
    }
    if (!std::filesystem::is_directory(root, ec)) throw SourceError(root.string() + ": no such file or directory");
    for (auto it = std::filesystem::recursive_directory_iterator(root, ec); it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
        if (ec) throw SourceError(root.string() + ": " + ec.message());
        if (it->is_directory() && it->path().filename() == ".git") {
            it.disable_recursion_pending();
            continue;
        }
        if (!it->is_regular_file()) continue;
        std::string relative = std::filesystem::relative(it->path(), root).generic_string();
        if (is_document_path(relative)) load(it->path(), relative);
    }
    catalog.put_all(std::move(docs), owners);
    return catalog;
}

}  // namespace anvil::registry
