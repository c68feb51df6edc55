// This host's GPUs as the feasibility gates judge them: the hardware layer's NVML reading
// (kernels/hardware) as the registry's inventory of measured evidence, and the newest collective
// probe receipt applied to it. The daemon and the CLI share this; the hardware layer knows nothing
// of the registry.
#pragma once

#include "kernels/hardware/collective_probe.hpp"
#include "kernels/hardware/nvml_inventory.hpp"
#include "registry/inventory.hpp"

namespace anvil::host {

// Every figure `measured` at the reading's time, citing NVML and the GPU; no GPUs when !reading.ok,
// with the reading's error as the source (what the daemon's status shows).
registry::Inventory measured_inventory(const hardware::InventoryReading& reading);

// What a receipt proves about `inventory`'s GPUs, set as its `collectives` and `collectives_notes`:
// proven only when the probe passed over exactly the inventory's GPUs; failed when it failed over
// GPUs all present here; otherwise (a subset proven, GPUs no longer here) unchanged, with a note.
void apply_probe_receipt(registry::Inventory& inventory, const hardware::ReadReceipt& receipt);

}  // namespace anvil::host
