#include "daemon/host/inventory_report.hpp"

#include <algorithm>
#include <cstdio>

#include "daemon/host/host_inventory.hpp"

namespace anvil::host {

namespace {

std::int64_t bytes_of(const registry::EvidenceVariable& v) {
    return v.value && std::holds_alternative<std::int64_t>(*v.value) ? std::get<std::int64_t>(*v.value) : 0;
}

}  // namespace

std::string gib(std::int64_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
    return buf;
}

nlohmann::json inventory_to_json(const hardware::InventoryReading& reading) {
    const registry::Inventory inv = measured_inventory(reading);
    nlohmann::json gpus = nlohmann::json::array();
    for (const auto& g : inv.gpus) {
        nlohmann::json gpu{{"uuid", g.uuid},
                           {"name", g.name},
                           {"compute_capability", g.compute_capability},
                           {"pci_bus_id", g.pci_bus_id},
                           {"total_bytes", bytes_of(g.total_bytes)},
                           {"free_bytes", g.free_bytes ? nlohmann::json(*g.free_bytes) : nlohmann::json()},
                           {"idle_used_bytes", bytes_of(g.idle_used_bytes)}};
        gpu["index"] = g.index ? nlohmann::json(*g.index) : nlohmann::json();
        gpus.push_back(std::move(gpu));
    }
    nlohmann::json out{{"available", reading.ok},
                       {"source", inv.source},
                       {"library", reading.library},
                       {"observed_at", reading.observed_at},
                       {"driver_version", inv.driver_version},
                       {"cuda_driver_version", inv.cuda_driver_version},
                       {"gpus", gpus},
                       {"notes", reading.notes}};
    if (!reading.ok) out["error"] = reading.error;
    if (reading.ok) {
        out["total_vram"] = inv.total_vram().to_json();
        out["idle_allocations"] = inv.idle_allocations().to_json();
    }
    return out;
}

std::string inventory_table(const hardware::InventoryReading& reading) {
    if (!reading.ok) return reading.error + "\n";
    const registry::Inventory inv = measured_inventory(reading);
    std::string out = "driver " + inv.driver_version + ", CUDA " + inv.cuda_driver_version + ", " +
                      std::to_string(inv.gpus.size()) + " GPU" + (inv.gpus.size() == 1 ? "" : "s") + " (" + inv.source +
                      ", " + reading.observed_at + ")\n";
    if (inv.gpus.empty()) return out;
    std::vector<std::vector<std::string>> rows{{"#", "UUID", "NAME", "CC", "TOTAL", "FREE", "IDLE USED", "PCI BUS ID"}};
    for (const auto& g : inv.gpus)
        rows.push_back({g.index ? std::to_string(*g.index) : "-", g.uuid, g.name, g.compute_capability.empty() ? "?" : g.compute_capability,
                        gib(bytes_of(g.total_bytes)), g.free_bytes ? gib(*g.free_bytes) : "?", gib(bytes_of(g.idle_used_bytes)),
                        g.pci_bus_id.empty() ? "?" : g.pci_bus_id});
    std::vector<std::size_t> width(rows[0].size(), 0);
    for (const auto& row : rows)
        for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
    for (const auto& row : rows) {
        std::string line;
        for (std::size_t c = 0; c < row.size(); ++c) {
            line += row[c];
            if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
        }
        out += line + "\n";
    }
    for (const auto& n : reading.notes) out += "note: " + n + "\n";
    return out;
}

}  // namespace anvil::host
