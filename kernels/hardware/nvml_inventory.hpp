// This host's GPUs as NVML reports them: per GPU its UUID, name, compute capability, total and
// free memory, memory already allocated at idle (total − free: what an engine cannot have), PCI
// bus id; the driver's version and the newest CUDA it supports. Every figure is a `measured`
// evidence variable for the feasibility gates (registry::Inventory).
//
// NVML is loaded at run time (dlopen), never linked: it ships with the driver, so a host without
// one still runs the daemon, and the reading says plainly why there are no GPUs.
#pragma once

#include <string>
#include <vector>

#include "registry/inventory.hpp"

namespace anvil::hardware {

// "libnvidia-ml.so.1", or $ANVIL_NVML_LIBRARY when set (a driver installed off the loader's path).
std::string default_nvml_library();

struct InventoryReading {
    bool ok = false;                  // NVML answered: `inventory` lists every GPU (possibly none)
    std::string error;                // why not, one line, when !ok
    std::vector<std::string> notes;   // figures a GPU does not support (left empty), one line each
    std::string library;              // the library asked for
    std::string observed_at;          // UTC, ISO 8601
    registry::Inventory inventory;    // source "NVML (<library>)"; no GPUs when !ok
};

// Never throws: a missing library, a missing symbol or an NVML error is a reading with `error`.
InventoryReading read_inventory(const std::string& nvml_library = default_nvml_library());

}  // namespace anvil::hardware
