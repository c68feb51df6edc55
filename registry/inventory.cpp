#include "registry/inventory.hpp"

#include <algorithm>
#include <charconv>

#include <fmt/ranges.h>

#include "registry/interval.hpp"

namespace anvil::registry {

namespace {

constexpr std::int64_t kMiB = 1024 * 1024;

EvidenceVariable bytes_variable(std::int64_t bytes, EvidenceStatus status, std::string source, std::string observed_at) {
    EvidenceVariable v;
    v.value = Number{bytes};
    v.unit = "bytes";
    v.status = status;
    v.source = std::move(source);
    v.observed_at = std::move(observed_at);
    return v;
}

// Reads "<key>_mib" or "<key>_bytes" (exactly one) as bytes.
std::optional<std::int64_t> read_memory(const Node& gpu, const std::string& key, JsonReader& reader) {
    const bool has_mib = gpu.child(key + "_mib").present(), has_bytes = gpu.child(key + "_bytes").present();
    if (has_mib == has_bytes) {
        reader.fail(gpu.child(key + "_mib"), "exactly one of `" + key + "_mib` and `" + key + "_bytes`");
        return std::nullopt;
    }
    if (has_bytes) return reader.integer(gpu, key + "_bytes", Presence::required, 0);
    auto mib = reader.integer(gpu, key + "_mib", Presence::required, 0);
    if (mib && *mib > INT64_MAX / kMiB) {
        reader.fail(gpu.child(key + "_mib"), "a size in MiB that fits in 64-bit bytes");
        return std::nullopt;
    }
    if (mib) return *mib * kMiB;
    return std::nullopt;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
}

std::optional<std::int64_t> to_mib(std::string_view s) {
    std::int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || v < 0 || v > INT64_MAX / kMiB) return std::nullopt;
    return v;
}

EvidenceVariable sum(const std::vector<Gpu>& gpus, EvidenceVariable Gpu::*field, const std::string& source) {
    std::int64_t total = 0;
    EvidenceStatus status = EvidenceStatus::measured;
    std::string observed_at;
    for (const auto& g : gpus) {
        const EvidenceVariable& v = g.*field;
        // Every inventory figure is an exact integer value (see parse_inventory, parse_nvidia_smi).
        const std::int64_t bytes = v.value ? std::get<std::int64_t>(*v.value) : 0;
        if (__builtin_add_overflow(total, bytes, &total)) throw ArithmeticOverflow("the inventory's total bytes do not fit in 64 bits");
        status = std::max(status, v.status);
        observed_at = std::max(observed_at, v.observed_at);
    }
    return bytes_variable(total, status, source, observed_at);
}

}  // namespace

std::string_view to_string(CollectivePath c) {
    switch (c) {
        case CollectivePath::unknown: return "unknown";
        case CollectivePath::proven: return "proven";
        case CollectivePath::failed: return "failed";
    }
    return "unknown";
}

EvidenceStatus Inventory::evidence() const {
    EvidenceStatus s = EvidenceStatus::measured;
    for (const auto& g : gpus) s = std::max({s, g.total_bytes.status, g.idle_used_bytes.status});
    return s;
}

EvidenceVariable Inventory::total_vram() const {
    std::vector<std::string> names;
    for (const auto& g : gpus) names.push_back(g.name);
    return sum(gpus, &Gpu::total_bytes, fmt::format("inventory ({}): {} GPUs: {}", source, gpus.size(), fmt::join(names, ", ")));
}

EvidenceVariable Inventory::idle_allocations() const {
    return sum(gpus, &Gpu::idle_used_bytes, "inventory (" + source + "): idle allocation before load");
}

json Inventory::to_json() const {
    json list = json::array();
    for (const auto& g : gpus) {
        json gpu{{"uuid", g.uuid}, {"name", g.name}, {"total_bytes", g.total_bytes.to_json()}, {"idle_used_bytes", g.idle_used_bytes.to_json()}};
        if (g.index) gpu["index"] = *g.index;
        if (!g.compute_capability.empty()) gpu["compute_capability"] = g.compute_capability;
        if (!g.pci_bus_id.empty()) gpu["pci_bus_id"] = g.pci_bus_id;
        if (g.free_bytes) gpu["free_bytes"] = *g.free_bytes;
        list.push_back(std::move(gpu));
    }
    json out{{"source", source}, {"gpus", list}, {"collectives", std::string(registry::to_string(collectives))}};
    if (scope != "inventory") out["scope"] = scope;
    if (!driver_version.empty()) out["driver_version"] = driver_version;
    if (!cuda_driver_version.empty()) out["cuda_driver_version"] = cuda_driver_version;
    if (!collectives_notes.empty()) out["collectives_notes"] = collectives_notes;
    return out;
}

std::optional<Inventory> parse_inventory(const Node& root, JsonReader& reader, std::string_view source) {
    const std::size_t before = reader.error_count();
    Inventory inv;
    inv.source = std::string(source);
    Node gpus = reader.array(root, "gpus");
    for (std::size_t i = 0; gpus.present() && i < gpus.value->size(); ++i) {
        Node g = gpus.at(i);
        if (!g.value->is_object()) {
            reader.fail(g, "a GPU object {uuid, name, memory_mib, idle_used_mib}");
            continue;
        }
        Gpu gpu;
        if (auto s = reader.string(g, "uuid")) gpu.uuid = *s;
        if (auto s = reader.string(g, "name")) gpu.name = *s;
        EvidenceStatus status = EvidenceStatus::confirmed;
        if (auto s = reader.string(g, "status", Presence::optional)) {
            auto parsed = parse_evidence_status(*s);
            if (parsed == EvidenceStatus::measured || parsed == EvidenceStatus::confirmed || parsed == EvidenceStatus::assumed) status = *parsed;
            else reader.fail(g.child("status"), "measured, confirmed or assumed (a declared GPU is a single figure)");
        }
        const std::string observed_at = reader.string(g, "observed_at", Presence::optional).value_or("");
        const std::string from = "configuration " + std::string(source) + " " + g.pointer;
        auto total = read_memory(g, "memory", reader);
        auto idle = read_memory(g, "idle_used", reader);
        if (total) gpu.total_bytes = bytes_variable(*total, status, from, observed_at);
        if (idle) gpu.idle_used_bytes = bytes_variable(*idle, status, from, observed_at);
        inv.gpus.push_back(std::move(gpu));
    }
    if (auto c = reader.string(root, "collectives", Presence::optional)) {
        if (*c == "proven") inv.collectives = CollectivePath::proven;
        else if (*c == "failed") inv.collectives = CollectivePath::failed;
        else if (*c != "unknown") reader.fail(root.child("collectives"), "unknown, proven or failed");
    }
    inv.collectives_notes = reader.string(root, "collectives_notes", Presence::optional).value_or("");
    if (reader.error_count() != before) return std::nullopt;
    return inv;
}

std::optional<Inventory> parse_nvidia_smi(std::string_view csv, std::string_view observed_at, std::string& error) {
    Inventory inv;
    inv.source = "nvidia-smi";
    std::size_t line_no = 0;
    while (!csv.empty()) {
        const std::size_t eol = csv.find('\n');
        std::string_view line = trim(csv.substr(0, eol));
        csv.remove_prefix(eol == std::string_view::npos ? csv.size() : eol + 1);
        ++line_no;
        if (line.empty()) continue;
        std::vector<std::string_view> fields;
        for (std::size_t start = 0;;) {
            const std::size_t comma = line.find(',', start);
            fields.push_back(trim(line.substr(start, comma - start)));
            if (comma == std::string_view::npos) break;
            start = comma + 1;
        }
        // A GPU name may itself hold a comma; uuid is first and the two sizes are last.
        const auto total = fields.size() >= 4 ? to_mib(fields[fields.size() - 2]) : std::nullopt;
        const auto used = fields.size() >= 4 ? to_mib(fields.back()) : std::nullopt;
        if (!total || !used) {
            error = "nvidia-smi line " + std::to_string(line_no) + ": expected `uuid, name, total MiB, used MiB`, found `" +
                    std::string(line) + "`";
            return std::nullopt;
        }
        Gpu gpu;
        gpu.uuid = std::string(fields[0]);
        for (std::size_t i = 1; i + 2 < fields.size(); ++i) gpu.name += (i > 1 ? ", " : "") + std::string(fields[i]);
        const std::string from = "nvidia-smi " + gpu.uuid;
        gpu.total_bytes = bytes_variable(*total * kMiB, EvidenceStatus::measured, from + " memory.total", std::string(observed_at));
        // memory.used is idle use only when measured before anything loads.
        gpu.idle_used_bytes = bytes_variable(*used * kMiB, EvidenceStatus::measured, from + " memory.used", std::string(observed_at));
        inv.gpus.push_back(std::move(gpu));
    }
    return inv;
}

Requirements with_inventory(Requirements requirements, const Inventory& inventory) {
    requirements.physical_vram_bytes = inventory.total_vram();
    EvidenceVariable idle = inventory.idle_allocations();
    auto it = std::find_if(requirements.vram_reserves.begin(), requirements.vram_reserves.end(),
                           [](const VramReserve& r) { return r.name == "idle_gpu_allocations"; });
    if (it != requirements.vram_reserves.end()) {
        it->kind = ReserveKind::physical;
        it->amount = std::move(idle);
    } else {
        requirements.vram_reserves.push_back({"idle_gpu_allocations", ReserveKind::physical, std::move(idle)});
    }
    return requirements;
}

}  // namespace anvil::registry
