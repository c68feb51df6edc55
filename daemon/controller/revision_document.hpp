// A ledger revision's recipe document, parsed again with its provenance: the ledger keeps the
// document's JSON and never parses it (state/ knows no recipe), so the steps that need the recipe
// (qualify, start, rank) ask here.
#pragma once

#include <optional>

#include "registry/document.hpp"
#include "state/records.hpp"

namespace anvil::daemon {

inline std::optional<registry::Document> document_of(const state::RevisionRow& revision) {
    registry::Provenance p;
    p.source_url = revision.source_url;
    p.commit = revision.commit_id;
    p.path = revision.path;
    p.blob_id = revision.blob_id;
    registry::Document doc = registry::parse_document(revision.document.dump(), p);
    if (!doc.recipe()) return std::nullopt;
    return doc;
}

}  // namespace anvil::daemon
