// How an inventory reading is shown: JSON for the API (GET /api/v1/inventory) and `anvil gpus
// --json`, and a table for people (`anvil gpus`).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "kernels/hardware/nvml_inventory.hpp"

namespace anvil::host {

// {"available", "error"?, "source", "library", "observed_at", "driver_version", "cuda_driver_version",
//  "gpus": [{"index", "uuid", "name", "compute_capability", "pci_bus_id", "total_bytes",
//  "free_bytes", "idle_used_bytes"}], "total_vram", "idle_allocations", "notes"}: sizes in bytes
// (plain integers); total_vram and idle_allocations are the evidence variables feasibility reads
// (measured_inventory).
nlohmann::json inventory_to_json(const hardware::InventoryReading& reading);

// One header line (driver, CUDA, where from) and a row per GPU; without a GPU, the reason.
std::string inventory_table(const hardware::InventoryReading& reading);

// "139.8 GiB"
std::string gib(std::int64_t bytes);

}  // namespace anvil::host
