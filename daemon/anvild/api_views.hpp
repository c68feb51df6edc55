// The JSON the API (and the systemd status line) shows of the controller: its status, each
// registry source, the inventory it judges with. Built from the Reconciler's read accessors and
// the ledger, on the caller's thread.
#pragma once

#include <nlohmann/json.hpp>

#include "daemon/controller/reconciler.hpp"
#include "state/store.hpp"

namespace anvil::daemon {

// GET /api/v1/status: the default, the policy, counts by status, engines, conditions, last pass.
nlohmann::json status_view(const Reconciler& reconciler, const state::Store& store);
// GET /api/v1/registry: each source's commit, last sync and error, and its refused documents.
nlohmann::json registry_view(const Reconciler& reconciler);
// The inventory feasibility judges with ({"source", "inventory"}; inventory null without one).
nlohmann::json inventory_view(const Reconciler& reconciler);
// A Slurm placement's cluster as slurmrestd lists it now: {"placement", "nodes", ...}, or
// {"placement", "error"} when it cannot be read (the error says which call and why).
nlohmann::json cluster_view(const drivers::SlurmPlacement& placement);
// GET /api/v1/decisions: the thresholds, the control, and each validated revision's numbers against
// it with its decision (docs/API.md).
nlohmann::json decisions_view(const Reconciler::PromotionPicture& picture, const state::Store& store);
// The thresholds as configured, and the limits each comparison applies (margin included).
nlohmann::json thresholds_json(const qualify::Thresholds& t);
// GET /api/v1/recipes/{id}/receipts: each qualification receipt the recipe's evidence points at,
// checked against the sha256 the ledger recorded, summarised (no request log or samples), with
// the control's measurements beside its own.
nlohmann::json receipts_view(const state::RecipeDetail& recipe, const state::Store& store, const qualify::Thresholds& thresholds);

}  // namespace anvil::daemon
