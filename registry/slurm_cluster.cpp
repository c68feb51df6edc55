#include "registry/slurm_cluster.hpp"
#include "support/text.hpp"

#include <algorithm>
#include <charconv>
#include <tuple>

namespace anvil::registry {

namespace {

constexpr std::int64_t kMiB = 1024 * 1024;

bool is_nothing(std::string_view s) { return s.empty() || s == "(null)" || s == "N/A" || s == "n/a"; }

// A GRES count: digits with an optional K, M, G, T or P suffix (powers of 1024, as Slurm prints them).
std::optional<std::int64_t> parse_count(std::string_view s) {
    std::int64_t multiplier = 1;
    if (!s.empty()) {
        const std::string_view suffixes = "KMGTP";
        if (const auto at = suffixes.find(static_cast<char>(std::toupper(static_cast<unsigned char>(s.back()))));
            at != std::string_view::npos) {
            for (std::size_t i = 0; i <= at; ++i) multiplier *= 1024;
            s.remove_suffix(1);
        }
    }
    std::int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v < 0 || v > INT64_MAX / multiplier) return std::nullopt;
    return v * multiplier;
}

// Splits at commas outside parentheses: "gpu:a100:2(S:0,1),mps:100" has two entries.
std::vector<std::string_view> split_entries(std::string_view text) {
    std::vector<std::string_view> out;
    int depth = 0;
    std::size_t start = 0;
    for (std::size_t i = 0; i <= text.size(); ++i) {
        if (i == text.size() || (text[i] == ',' && depth == 0)) {
            out.push_back(text.substr(start, i - start));
            start = i + 1;
        } else if (text[i] == '(') {
            ++depth;
        } else if (text[i] == ')') {
            depth = std::max(0, depth - 1);
        }
    }
    return out;
}

}  // namespace

std::optional<std::vector<GresEntry>> parse_gres(std::string_view text, std::string& error) {
    std::vector<GresEntry> out;
    if (is_nothing(text)) return out;
    for (std::string_view entry : split_entries(text)) {
        // A trailing "(S:0-1)" or "(IDX:0,2)" is where the GPUs are; "(null)" after a colon is a value.
        if (!entry.empty() && entry.back() == ')') {
            const auto paren = entry.rfind('(');
            if (paren != std::string_view::npos && paren > 0 && entry[paren - 1] != ':') entry = entry.substr(0, paren);
        } else if (const auto paren = entry.rfind('('); paren != std::string_view::npos && entry.find(')', paren) == std::string_view::npos) {
            error = "GRES entry `" + std::string(entry) + "`: an unclosed `(`";
            return std::nullopt;
        }
        if (entry.empty()) {
            error = "GRES list `" + std::string(text) + "`: an empty entry";
            return std::nullopt;
        }
        std::vector<std::string_view> parts;
        for (std::size_t start = 0;;) {
            const std::size_t colon = entry.find(':', start);
            parts.push_back(entry.substr(start, colon - start));
            if (colon == std::string_view::npos) break;
            start = colon + 1;
        }
        GresEntry g;
        g.name = std::string(parts[0]);
        // name, name:count, name:type, name:type:count ("gpu:a100" means one a100).
        std::optional<std::int64_t> count = 1;
        if (parts.size() == 2) {
            if (auto c = parse_count(parts[1])) count = c;
            else g.type = is_nothing(parts[1]) ? "" : std::string(parts[1]);
        } else if (parts.size() == 3) {
            g.type = is_nothing(parts[1]) ? "" : std::string(parts[1]);
            count = parse_count(parts[2]);
        } else if (parts.size() > 3) {
            count = std::nullopt;
        }
        if (g.name.empty() || !count) {
            error = "GRES entry `" + std::string(entry) + "`: expected name[:type][:count]";
            return std::nullopt;
        }
        g.count = *count;
        out.push_back(std::move(g));
    }
    return out;
}

std::int64_t SlurmNode::gpu_count() const {
    std::int64_t n = 0;
    for (const auto& g : gpus) n += g.count;
    return n;
}

std::int64_t SlurmNode::free_gpus() const {
    std::int64_t n = 0;
    for (const auto& g : gpus) n += std::max<std::int64_t>(0, g.count - g.used);
    return n;
}

bool SlurmNode::usable() const {
    const std::string s = support::ascii_lower(state);
    if (s == "down" || s == "fail" || s == "future" || s == "unknown" || s == "error") return false;
    for (const auto& f : state_flags) {
        const std::string flag = support::ascii_lower(f);
        if (flag == "drain" || flag == "drained" || flag == "draining" || flag == "fail" || flag == "not_responding" ||
            flag == "maintenance" || flag == "future" || flag == "invalid_reg" || flag == "invalid")
            return false;
    }
    return true;
}

json SlurmCluster::to_json() const {
    json list = json::array();
    for (const auto& n : nodes) {
        json gpus = json::array();
        for (const auto& g : n.gpus) gpus.push_back({{"type", g.type}, {"count", g.count}, {"used", g.used}});
        list.push_back({{"name", n.name}, {"address", n.address}, {"state", n.state}, {"state_flags", n.state_flags},
                        {"usable", n.usable()}, {"partitions", n.partitions}, {"cpus", n.cpus}, {"idle_cpus", n.idle_cpus},
                        {"real_memory_mib", n.real_memory_mib}, {"alloc_memory_mib", n.alloc_memory_mib}, {"gpus", gpus},
                        {"gpu_count", n.gpu_count()}, {"free_gpus", n.free_gpus()}});
    }
    return {{"source", source}, {"observed_at", observed_at}, {"nodes", list}};
}

std::optional<SlurmCluster> parse_slurm_nodes(const json& answer, std::string_view source, std::string_view observed_at,
                                              FieldErrors& errors) {
    const std::size_t before = errors.size();
    JsonReader reader(errors);
    const Node root{&answer, ""};
    if (!answer.is_object()) {
        reader.fail(root, "slurmrestd's node list {\"nodes\": [...]}", render_short(answer));
        return std::nullopt;
    }
    // slurmrestd reports failures inside a 200 or a 500 alike: its `errors` array says what.
    if (const Node errs = root.child("errors"); errs.present() && errs.value->is_array() && !errs.value->empty()) {
        for (std::size_t i = 0; i < errs.value->size(); ++i) {
            const json& e = (*errs.value)[i];
            const std::string what = e.is_object() ? e.value("error", e.value("description", e.dump())) : e.dump();
            reader.fail(errs.at(i).pointer, "no error from slurmrestd", what);
        }
        return std::nullopt;
    }
    SlurmCluster cluster;
    cluster.source = std::string(source);
    cluster.observed_at = std::string(observed_at);
    const Node list = reader.array(root, "nodes");
    for (std::size_t i = 0; list.present() && i < list.value->size(); ++i) {
        const Node n = list.at(i);
        if (!n.value->is_object()) {
            reader.fail(n, "a node object");
            continue;
        }
        SlurmNode node;
        node.name = reader.string(n, "name").value_or("");
        node.address = reader.string(n, "address", Presence::optional).value_or(node.name);
        node.state = reader.string(n, "state").value_or("");
        node.state_flags = reader.string_array(n, "state_flags", Presence::optional);
        node.partitions = reader.string_array(n, "partitions", Presence::optional);
        node.cpus = reader.integer(n, "cpus", Presence::required, 0).value_or(0);
        node.idle_cpus = reader.integer(n, "idle_cpus", Presence::optional, 0).value_or(node.cpus);
        node.real_memory_mib = reader.integer(n, "real_memory", Presence::required, 0).value_or(0);
        node.alloc_memory_mib = reader.integer(n, "alloc_memory", Presence::optional, 0).value_or(0);
        std::string error;
        const auto gres = parse_gres(reader.string(n, "gres", Presence::optional).value_or(""), error);
        if (!gres) reader.fail(n.child("gres").pointer, "a GRES list name[:type][:count],...", error);
        const auto used = parse_gres(reader.string(n, "gres_used", Presence::optional).value_or(""), error);
        if (!used) reader.fail(n.child("gres_used").pointer, "a GRES list name[:type][:count],...", error);
        for (const auto& g : gres.value_or(std::vector<GresEntry>{}))
            if (g.name == "gpu" && g.count > 0) node.gpus.push_back({g.type, g.count, 0});
        // An untyped use ("gpu:2") on a typed node counts against its types in order.
        for (const auto& u : used.value_or(std::vector<GresEntry>{})) {
            if (u.name != "gpu") continue;
            std::int64_t left = u.count;
            for (auto& g : node.gpus) {
                if (!u.type.empty() && g.type != u.type) continue;
                const std::int64_t take = std::min(left, g.count - g.used);
                g.used += take;
                left -= take;
            }
        }
        cluster.nodes.push_back(std::move(node));
    }
    if (errors.size() != before) return std::nullopt;
    return cluster;
}

namespace {

std::optional<std::int64_t> gpu_mib(const GpuMemoryByType& memory, const std::string& type) {
    if (auto it = memory.find(type); it != memory.end()) return it->second;
    if (auto it = memory.find("*"); it != memory.end()) return it->second;
    return std::nullopt;
}

}  // namespace

const SlurmNode* best_node(const SlurmCluster& cluster, std::string_view partition, const GpuMemoryByType& memory,
                           std::size_t* candidates) {
    auto node_gpu_mib = [&](const SlurmNode& n) {
        std::int64_t total = 0;
        for (const auto& g : n.gpus) total += g.count * gpu_mib(memory, g.type).value_or(0);
        return total;
    };
    auto rank = [&](const SlurmNode& x) { return std::make_tuple(x.gpu_count(), node_gpu_mib(x), x.cpus, x.real_memory_mib); };
    const SlurmNode* best = nullptr;
    std::size_t usable = 0;
    for (const auto& n : cluster.nodes) {
        const bool in_partition =
            partition.empty() || std::find(n.partitions.begin(), n.partitions.end(), partition) != n.partitions.end();
        if (!in_partition || !n.usable()) continue;
        ++usable;
        if (!best || rank(n) > rank(*best)) best = &n;
    }
    if (candidates) *candidates = usable;
    return best;
}

std::string gpu_gres_request(const SlurmNode* judged, std::int64_t count) {
    std::string type;
    bool one_type = judged != nullptr;
    if (judged)
        for (const auto& g : judged->gpus) {
            if (g.count <= 0) continue;
            if (g.type.empty() || (!type.empty() && g.type != type)) one_type = false;
            type = g.type;
        }
    return one_type && !type.empty() ? "gpu:" + type + ":" + std::to_string(count) : "gpu:" + std::to_string(count);
}

std::optional<Inventory> best_node_inventory(const SlurmCluster& cluster, std::string_view partition,
                                             const GpuMemoryByType& memory, std::string& why) {
    std::size_t candidates = 0;
    const SlurmNode* best = best_node(cluster, partition, memory, &candidates);
    const std::string where = partition.empty() ? "the cluster" : "partition " + std::string(partition);
    if (!best) {
        why = "no usable node in " + where + " (" + std::to_string(cluster.nodes.size()) + " nodes listed by " + cluster.source + ")";
        return std::nullopt;
    }
    Inventory inv;
    inv.source = cluster.source + ", node " + best->name;
    inv.scope = "the largest Slurm node (" + best->name + ", of " + std::to_string(candidates) + " usable in " + where + ")";
    for (const auto& group : best->gpus) {
        const auto mib = gpu_mib(memory, group.type);
        for (std::int64_t i = 0; i < group.count; ++i) {
            Gpu gpu;
            gpu.uuid = "slurm:" + best->name + ":gpu" + (group.type.empty() ? "" : ":" + group.type) + ":" + std::to_string(i);
            gpu.name = group.type.empty() ? "gpu (GRES)" : group.type + " (GRES)";
            gpu.total_bytes.unit = gpu.idle_used_bytes.unit = "bytes";
            gpu.total_bytes.observed_at = gpu.idle_used_bytes.observed_at = cluster.observed_at;
            if (mib) {
                gpu.total_bytes.value = Number{*mib * kMiB};
                gpu.total_bytes.status = EvidenceStatus::confirmed;
                gpu.total_bytes.source = "configuration placement.gpu_memory_mib." + (memory.count(group.type) ? group.type : "*");
            } else {
                gpu.total_bytes.status = EvidenceStatus::unknown;
                gpu.total_bytes.notes = "Slurm counts GPUs, not their memory: set placement.gpu_memory_mib." +
                                        (group.type.empty() ? std::string("*") : group.type);
            }
            // Slurm hands out whole GPUs: nothing else holds memory on one a job is given.
            gpu.idle_used_bytes.value = Number{std::int64_t{0}};
            gpu.idle_used_bytes.status = EvidenceStatus::assumed;
            gpu.idle_used_bytes.source = "a GPU Slurm allocates is the job's alone";
            inv.gpus.push_back(std::move(gpu));
        }
    }
    return inv;
}

}  // namespace anvil::registry
