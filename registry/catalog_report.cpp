#include "registry/catalog_report.hpp"

#include "support/utf8.hpp"

namespace anvil::registry {

using nlohmann::json;

namespace {

// Text that did not come from a parsed document (a file name, a configured location, a parser's
// message) may hold bytes that are not UTF-8; dump() would throw on them.
std::string text(std::string_view s) { return support::to_valid_utf8(s); }
json texts(const std::vector<std::string>& lines) {
    json out = json::array();
    for (const auto& line : lines) out.push_back(text(line));
    return out;
}

}  // namespace

json document_report(const Catalog& catalog, const Document& doc) {
    json errors = json::array();
    for (const auto& e : doc.errors)
        errors.push_back({{"pointer", text(e.pointer)}, {"expected", text(e.expected)}, {"found", text(e.found)}, {"message", format_error(doc.provenance.path, e)}});
    if (auto first = catalog.duplicate_of(doc)) {
        auto lines = catalog.problems(doc);
        errors.push_back({{"pointer", "/id"}, {"expected", "a unique id"}, {"found", text(*first)}, {"message", lines.back()}});
    }
    json out = {
        {"path", text(doc.provenance.path)},
        {"id", text(doc.id)},
        {"kind", std::string(to_string(doc.kind))},
        {"schema", doc.schema},
        {"valid", errors.empty()},
        {"pinned", doc.pins_apply() ? json(doc.valid() && doc.pins.pinned()) : json(nullptr)},
        {"unpinned_reasons", texts(doc.pins.unpinned_reasons)},
        {"evidence_class", doc.is_external_prior() ? "external-prior" : "registry"},
        {"warnings", texts(doc.warnings)},
        {"errors", errors},
        {"provenance",
         {{"source", text(doc.provenance.source_url)},
          {"commit", doc.provenance.commit},
          {"path", text(doc.provenance.path)},
          {"blob", doc.provenance.blob_id},
          {"sha256", doc.provenance.sha256}}},
    };
    return out;
}

CatalogSummary summarize(const Catalog& catalog) {
    CatalogSummary s;
    for (const auto& [_, doc] : catalog.documents()) {
        ++s.documents;
        if (!catalog.usable(doc)) {
            ++s.invalid;
            continue;
        }
        ++s.valid;
        if (!doc.pins_apply()) {
        } else if (doc.pins.pinned()) {
            ++s.pinned;
        } else {
            ++s.unpinned;
        }
        if (!doc.warnings.empty()) ++s.warnings;
    }
    return s;
}

json catalog_report(const Catalog& catalog, const std::string& source, const std::string& ref) {
    json docs = json::array();
    for (const auto& [_, doc] : catalog.documents()) docs.push_back(document_report(catalog, doc));
    const auto s = summarize(catalog);
    return {
        {"source", text(source)},
        {"ref", text(ref)},
        {"commit", catalog.commit()},
        {"summary",
         {{"documents", s.documents}, {"valid", s.valid}, {"invalid", s.invalid}, {"pinned", s.pinned}, {"unpinned", s.unpinned}}},
        {"documents", docs},
    };
}

}  // namespace anvil::registry
