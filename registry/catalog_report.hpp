// What a registry check reports, as JSON: per document its id, kind, validity, pins, problems and
// provenance. The CLI prints it; the daemon's API will serve the same shape.
#pragma once

#include <nlohmann/json.hpp>

#include "registry/catalog.hpp"

namespace anvil::registry {

nlohmann::json document_report(const Catalog& catalog, const Document& doc);

struct CatalogSummary {
    std::size_t documents = 0, valid = 0, invalid = 0, pinned = 0, unpinned = 0, warnings = 0;
};
CatalogSummary summarize(const Catalog& catalog);

// {"source", "ref", "commit", "summary", "documents": [...]}
nlohmann::json catalog_report(const Catalog& catalog, const std::string& source, const std::string& ref);

}  // namespace anvil::registry
