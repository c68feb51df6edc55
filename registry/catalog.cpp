#include "registry/catalog.hpp"

#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "registry/utf8.hpp"

namespace anvil::registry {

std::string_view to_string(SyncReport::Mode mode) {
    switch (mode) {
        case SyncReport::Mode::unchanged: return "unchanged";
        case SyncReport::Mode::full: return "full";
        case SyncReport::Mode::incremental: return "incremental";
    }
    return "unchanged";
}

std::string Catalog::id_key(const Document& doc) {
    return std::string(to_string(doc.kind)) + ":" + doc.id;
}

void Catalog::put(Document doc) {
    erase(doc.provenance.path);
    if (!doc.id.empty()) by_id_[id_key(doc)].insert(doc.provenance.path);
    std::string path = doc.provenance.path;
    documents_.emplace(std::move(path), std::move(doc));
}

void Catalog::erase(const std::string& raw_path) {
    const std::string path = to_valid_utf8(raw_path);  // as parse_document keys it
    auto it = documents_.find(path);
    if (it == documents_.end()) return;
    if (!it->second.id.empty()) {
        auto key = id_key(it->second);
        auto ids = by_id_.find(key);
        if (ids != by_id_.end()) {
            ids->second.erase(path);
            if (ids->second.empty()) by_id_.erase(ids);
        }
    }
    documents_.erase(it);
}

std::optional<std::string> Catalog::duplicate_of(const Document& doc) const {
    if (doc.id.empty()) return std::nullopt;
    auto ids = by_id_.find(id_key(doc));
    if (ids == by_id_.end() || ids->second.empty()) return std::nullopt;
    const std::string& first = *ids->second.begin();
    if (first == doc.provenance.path) return std::nullopt;
    return first;
}

std::vector<std::string> Catalog::problems(const Document& doc) const {
    auto lines = doc.error_lines();
    if (auto first = duplicate_of(doc))
        lines.push_back(format_error(doc.provenance.path, {"/id", "an id no other " + std::string(to_string(doc.kind)) + " uses",
                                                           "\"" + doc.id + "\", already defined by " + *first}));
    return lines;
}

const Document* Catalog::find(DocumentKind kind, const std::string& id) const {
    auto ids = by_id_.find(std::string(to_string(kind)) + ":" + id);
    if (ids == by_id_.end() || ids->second.empty()) return nullptr;
    auto it = documents_.find(*ids->second.begin());
    return it == documents_.end() ? nullptr : &it->second;
}

SyncReport Catalog::sync(GitSource& source) {
    return apply(source, source.fetch());
}

SyncReport Catalog::apply(const GitSource& source, const std::string& commit) {
    SyncReport report;
    report.previous_commit = commit_;
    report.commit = commit;
    if (commit == commit_ && source.url() == source_url_) return report;

    auto read = [&](const std::string& path, const std::string& blob_id) {
        return parse_document(source.read_blob(blob_id), Provenance{source.url(), commit, path, blob_id, ""}, limits_);
    };

    if (commit_.empty() || source.url() != source_url_) report.full_reason = "first read of " + source.url();
    else if (!source.has_commit(commit_)) report.full_reason = "previous commit " + commit_ + " is no longer in the source";
    else if (!source.descends_from(commit, commit_))
        report.full_reason = "ref rewound or force-pushed from " + commit_.substr(0, 12) + " to " + commit.substr(0, 12);

    if (!report.full_reason.empty()) {
        if (!commit_.empty()) spdlog::warn("registry {}: {}; reading every document again", source.url(), report.full_reason);
        report.mode = SyncReport::Mode::full;
        std::map<std::string, Document> previous;
        previous.swap(documents_);
        by_id_.clear();
        for (const auto& entry : source.list_documents(commit)) {
            auto old = previous.find(to_valid_utf8(entry.path));
            if (old == previous.end()) ++report.added;
            else if (old->second.provenance.blob_id != entry.blob_id) ++report.modified;
            if (old == previous.end() || old->second.provenance.blob_id != entry.blob_id) report.changed_paths.push_back(to_valid_utf8(entry.path));
            if (old != previous.end()) previous.erase(old);
            put(read(entry.path, entry.blob_id));
        }
        for (const auto& [path, _] : previous) {
            ++report.deleted;
            report.changed_paths.push_back(path);
        }
    } else {
        report.mode = SyncReport::Mode::incremental;
        for (const auto& change : source.diff(commit_, commit)) {
            switch (change.kind) {
                case PathChange::Kind::added: ++report.added; break;
                case PathChange::Kind::modified: ++report.modified; break;
                case PathChange::Kind::deleted: ++report.deleted; break;
                case PathChange::Kind::renamed:
                    ++report.renamed;
                    erase(change.old_path);
                    report.changed_paths.push_back(to_valid_utf8(change.old_path));
                    break;
            }
            report.changed_paths.push_back(to_valid_utf8(change.path));
            if (change.kind == PathChange::Kind::deleted) erase(change.path);
            else put(read(change.path, change.blob_id));
        }
    }
    source_url_ = source.url();
    commit_ = commit;
    return report;
}

Catalog Catalog::from_filesystem(const std::filesystem::path& root) {
    Catalog catalog;
    catalog.source_url_ = root.string();
    auto load = [&](const std::filesystem::path& file, const std::string& relative) {
        std::ifstream in(file, std::ios::binary);
        std::ostringstream bytes;
        bytes << in.rdbuf();
        if (!in && !in.eof()) throw SourceError(file.string() + ": cannot read");
        catalog.put(parse_document(bytes.str(), Provenance{root.string(), "", relative, "", ""}));
    };
    std::error_code ec;
    if (std::filesystem::is_regular_file(root, ec)) {
        load(root, root.string());
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
    return catalog;
}

}  // namespace anvil::registry
