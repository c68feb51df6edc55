// This machine's GPUs, each figure an evidence variable: measured (nvidia-smi) where a GPU exists,
// declared in configuration otherwise; and whether the host has proven a collective path between
// them. The inventory is what the feasibility gates judge "here" against.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "registry/evidence_variable.hpp"
#include "registry/feasibility_input.hpp"

namespace anvil::registry {

// Whether GPUs of this host can run collectives (all-reduce over PCIe/NVLink) for tensor
// parallelism. Unknown until a probe has run.
enum class CollectivePath { unknown, proven, failed };
std::string_view to_string(CollectivePath c);

struct Gpu {
    std::string uuid;
    std::string name;
    EvidenceVariable total_bytes;
    EvidenceVariable idle_used_bytes;  // allocated before anything loads (driver, display)
    // Measured by NVML (kernels/hardware); empty or absent when declared or read from nvidia-smi.
    std::optional<int> index;               // NVML's device index
    std::string compute_capability;         // "9.0"
    std::string pci_bus_id;                 // "00000000:19:00.0"
    std::optional<std::int64_t> free_bytes;  // free when measured
};

struct Inventory {
    std::string source;  // "NVML …", "nvidia-smi" or "configuration <file>"
    // What the GPUs are, in the gates' reasons ("needs 8 GPUs, <scope> has 4"): this host's, or the
    // largest node of a cluster (registry/slurm_cluster).
    std::string scope = "inventory";
    std::vector<Gpu> gpus;
    std::string driver_version;       // "580.95.05", when measured
    std::string cuda_driver_version;  // the newest CUDA the driver supports: "13.0", when measured
    CollectivePath collectives = CollectivePath::unknown;
    std::string collectives_notes;

    // How the GPU list is known: the weakest status among its figures (measured for an empty list).
    EvidenceStatus evidence() const;
    // Σ total_bytes and Σ idle_used_bytes, as variables the calculator can read.
    EvidenceVariable total_vram() const;
    EvidenceVariable idle_allocations() const;
    json to_json() const;
};

// Configuration: {"gpus": [{"uuid", "name", "memory_mib" | "memory_bytes",
// "idle_used_mib" | "idle_used_bytes", "status"?, "observed_at"?}], "collectives"?, "collectives_notes"?}.
// A declared figure is `confirmed` (the operator vouches for the hardware) unless `status` says
// measured or assumed.
std::optional<Inventory> parse_inventory(const Node& root, JsonReader& reader, std::string_view source);

// The output of `nvidia-smi --query-gpu=uuid,name,memory.total,memory.used --format=csv,noheader,nounits`
// (MiB), measured at `observed_at`. Returns nullopt and sets `error` for a line it cannot read.
std::optional<Inventory> parse_nvidia_smi(std::string_view csv, std::string_view observed_at, std::string& error);
inline constexpr const char* kNvidiaSmiQuery =
    "nvidia-smi --query-gpu=uuid,name,memory.total,memory.used --format=csv,noheader,nounits";

// The requirements on this machine: `physical_vram_bytes` becomes the inventory's total, and the
// physical reserve `idle_gpu_allocations` its idle use (added when absent). Other reserves stay as
// written, since they are policy, not hardware.
Requirements with_inventory(Requirements requirements, const Inventory& inventory);

}  // namespace anvil::registry
