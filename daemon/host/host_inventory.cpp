#include "daemon/host/host_inventory.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

namespace anvil::host {

namespace {

registry::EvidenceVariable measured_bytes(std::int64_t bytes, std::string source, const std::string& observed_at) {
    registry::EvidenceVariable v;
    v.value = registry::Number{bytes};
    v.unit = "bytes";
    v.status = registry::EvidenceStatus::measured;
    v.source = std::move(source);
    v.observed_at = observed_at;
    return v;
}

}  // namespace

registry::Inventory measured_inventory(const hardware::InventoryReading& reading) {
    registry::Inventory inventory;
    inventory.source = reading.source;
    inventory.driver_version = reading.driver_version;
    inventory.cuda_driver_version = reading.cuda_driver_version;
    for (const auto& g : reading.gpus) {
        registry::Gpu gpu;
        gpu.index = g.index;
        gpu.uuid = g.uuid;
        gpu.name = g.name;
        gpu.compute_capability = g.compute_capability;
        gpu.pci_bus_id = g.pci_bus_id;
        const std::string from = "NVML " + g.uuid;
        gpu.total_bytes = measured_bytes(g.total_bytes, from + " memory total", reading.observed_at);
        gpu.free_bytes = g.free_bytes;
        gpu.idle_used_bytes = measured_bytes(g.idle_used_bytes, from + " memory total - free, before anvil loads anything",
                                             reading.observed_at);
        inventory.gpus.push_back(std::move(gpu));
    }
    return inventory;
}

void apply_probe_receipt(registry::Inventory& inventory, const hardware::ReadReceipt& read) {
    const nlohmann::json& r = read.receipt;
    std::set<std::string> here, probed;
    for (const auto& g : inventory.gpus) here.insert(g.uuid);
    for (const auto& g : r.value("gpus", nlohmann::json::array()))
        if (g.is_string()) probed.insert(g.get<std::string>());
    const std::string outcome = r.value("outcome", std::string());
    const std::string cite = " (" + read.path.filename().string() + " sha256 " + read.sha256.substr(0, 12) + ", " +
                             r.value("written_at", std::string("?")) + ")";
    const bool all_here = !probed.empty() && std::includes(here.begin(), here.end(), probed.begin(), probed.end());
    if (!all_here) {
        inventory.collectives_notes = "the last collective probe ran over GPUs not on this host: probe again" + cite;
        return;
    }
    if (outcome == "failed") {
        inventory.collectives = registry::CollectivePath::failed;
        inventory.collectives_notes = "collective probe failed: " + r.value("error", std::string("?")) + cite;
        return;
    }
    if (outcome != "proven") {
        inventory.collectives_notes = "collective probe receipt has no outcome" + cite;
        return;
    }
    if (probed != here) {
        inventory.collectives_notes = "the last collective probe proved " + std::to_string(probed.size()) + " of " +
                                      std::to_string(here.size()) + " GPUs: probe them all" + cite;
        return;
    }
    std::string transports;
    for (const auto& t : r.value("transports", nlohmann::json::array()))
        if (t.is_string()) transports += (transports.empty() ? "" : ", ") + t.get<std::string>();
    std::string busbw = "?";
    const auto& results = r.value("results", nlohmann::json::array());
    if (!results.empty() && results.back().is_object()) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1f", results.back().value("busbw_gbps", 0.0));
        busbw = buf;
    }
    inventory.collectives = registry::CollectivePath::proven;
    inventory.collectives_notes = "NCCL " + r.value("nccl_version", std::string("?")) + " all-reduce over " +
                                  std::to_string(probed.size()) + " GPUs via " + (transports.empty() ? "?" : transports) +
                                  ", bus bandwidth " + busbw + " GB/s at " +
                                  std::to_string((results.empty() ? 0 : results.back().value("bytes", std::int64_t{0})) >> 20) + " MiB" +
                                  cite;
}

}  // namespace anvil::host
