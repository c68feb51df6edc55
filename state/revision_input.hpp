// Where a registry document becomes the fields the ledger records (RevisionInput): the one place
// state/ meets registry::Document, so the store itself never reads a document.
#pragma once

#include "registry/document.hpp"
#include "state/records.hpp"

namespace anvil::state {

// Throws StoreError unless `doc` is a valid recipe document.
RevisionInput revision_input(const registry::Document& doc);

}  // namespace anvil::state
