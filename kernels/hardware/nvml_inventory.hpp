// This host's GPUs as NVML reports them: per GPU its UUID, name, compute capability, total and
// free memory, memory already allocated at idle (total − free: what an engine cannot have), PCI
// bus id; the driver's version and the newest CUDA it supports. Plain figures in this layer's own
// types: the daemon (daemon/host) turns them into the registry's measured evidence.
//
// NVML is loaded at run time (dlopen), never linked: it ships with the driver, so a host without
// one still runs the daemon, and the reading says plainly why there are no GPUs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace anvil::hardware {

// "libnvidia-ml.so.1", or $ANVIL_NVML_LIBRARY when set (a driver installed off the loader's path).
std::string default_nvml_library();

struct GpuReading {
    int index = 0;                      // NVML's device index
    std::string uuid;
    std::string name;
    std::string compute_capability;     // "9.0"; empty when the GPU does not say (a note says why)
    std::string pci_bus_id;             // "00000000:19:00.0"; empty likewise
    std::int64_t total_bytes = 0;
    std::int64_t free_bytes = 0;
    std::int64_t idle_used_bytes = 0;   // total - free before anvil loads anything
};

struct InventoryReading {
    bool ok = false;                  // NVML answered: `gpus` lists every GPU (possibly none)
    std::string error;                // why not, one line, when !ok
    std::vector<std::string> notes;   // figures a GPU does not support (left empty), one line each
    std::string library;              // the library asked for
    std::string observed_at;          // UTC, ISO 8601
    std::string source;               // "NVML (<library>)", or the error when !ok
    std::string driver_version;       // "580.95.05"
    std::string cuda_driver_version;  // the newest CUDA the driver supports: "13.0"
    std::vector<GpuReading> gpus;     // none when !ok
};

// Never throws: a missing library, a missing symbol or an NVML error is a reading with `error`.
InventoryReading read_inventory(const std::string& nvml_library = default_nvml_library());

}  // namespace anvil::hardware
