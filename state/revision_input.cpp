#include "state/revision_input.hpp"

#include "state/sqlite.hpp"

namespace anvil::state {

RevisionInput revision_input(const registry::Document& doc) {
    const auto* recipe = doc.recipe();
    if (!recipe || !doc.valid()) throw StoreError("only valid recipe documents become revisions (" + doc.provenance.path + " is not one)");
    RevisionInput out;
    out.recipe_id = recipe->id;
    out.sha256 = doc.provenance.sha256;
    out.commit_id = doc.provenance.commit;
    out.path = doc.provenance.path;
    out.blob_id = doc.provenance.blob_id;
    out.engine = recipe->engine_name;
    out.hardware_id = recipe->hardware_id;
    out.launch_kind = recipe->launch.kind;
    out.serving_slot = recipe->serving.slot;
    out.pinned = doc.pins.pinned();
    out.unpinned_reasons = doc.pins.unpinned_reasons;
    out.description = recipe->description;
    out.document = doc.to_json().dump();
    return out;
}

}  // namespace anvil::state
