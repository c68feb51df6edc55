// A Slurm cluster as the feasibility gates see it: its nodes (CPUs, memory, GPUs declared as GRES,
// what is allocated), read from slurmrestd's node list, and the node a recipe is judged against —
// the largest usable one in the partition, because a job never spans nodes for one engine. Pure:
// the HTTP call lives with the supervisor (daemon/drivers/slurm_rest).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "registry/inventory.hpp"
#include "registry/json_reader.hpp"

namespace anvil::registry {

// One entry of a GRES string: "gpu:a100:4(S:0-1)" is {gpu, a100, 4}. An untyped entry has type "".
struct GresEntry {
    std::string name;
    std::string type;
    std::int64_t count = 0;
};
// Slurm's GRES list ("gpu:4", "gpu:a100:2(S:0),gpu:v100:1", "gpu:(null):0(IDX:N/A)", "mps:100K");
// "(null)" and "N/A" read as nothing. Nullopt, with `error` saying which entry, for text that is not one.
std::optional<std::vector<GresEntry>> parse_gres(std::string_view text, std::string& error);

struct SlurmGpuGroup {
    std::string type;  // the GRES type ("a100"), "" when the cluster does not name one
    std::int64_t count = 0;
    std::int64_t used = 0;
};

struct SlurmNode {
    std::string name;
    std::string address;
    std::string state;                    // "idle", "mixed", "allocated", "down", ...
    std::vector<std::string> state_flags;  // "DRAIN", "NOT_RESPONDING", ...
    std::vector<std::string> partitions;
    std::int64_t cpus = 0;
    std::int64_t idle_cpus = 0;
    std::int64_t real_memory_mib = 0;
    std::int64_t alloc_memory_mib = 0;
    std::vector<SlurmGpuGroup> gpus;

    std::int64_t gpu_count() const;
    std::int64_t free_gpus() const;
    // Whether Slurm would start a job here now or later: not down, drained, failed or future.
    bool usable() const;
};

struct SlurmCluster {
    std::string source;  // "slurmrestd http://… (Slurm 22.05.8)"
    std::string observed_at;
    std::vector<SlurmNode> nodes;
    json to_json() const;
};

// slurmrestd's GET /slurm/v0.0.38/nodes answer. Errors name the JSON path; the answer's own `errors`
// are reported as one.
std::optional<SlurmCluster> parse_slurm_nodes(const json& answer, std::string_view source, std::string_view observed_at,
                                              FieldErrors& errors);

// Per-GPU memory by GRES type, from configuration: Slurm knows how many GPUs a node has, not their
// memory. "*" applies to every type not named.
using GpuMemoryByType = std::map<std::string, std::int64_t>;  // MiB

// The node a recipe is judged against: among the usable nodes in `partition` (empty: every
// partition), the one with the most GPUs, then the most GPU memory, then CPUs and memory. Null
// when none is usable; `candidates` counts the usable ones.
const SlurmNode* best_node(const SlurmCluster& cluster, std::string_view partition, const GpuMemoryByType& memory,
                           std::size_t* candidates = nullptr);
// That node as an inventory. Its GPUs' memory is `confirmed` from `memory` where configured and
// `unknown` otherwise. The inventory's `scope` names the node and how many it was chosen from.
// Nullopt when no node is usable, with `why` saying so.
std::optional<Inventory> best_node_inventory(const SlurmCluster& cluster, std::string_view partition,
                                             const GpuMemoryByType& memory, std::string& why);
// The GRES a job asks for to get `count` GPUs of the kind the gates judged by (on `judged`, the
// best node): "gpu:<type>:<count>" when that node's GPUs are all of one named type, so the job
// cannot land on a smaller kind of GPU elsewhere in the partition; "gpu:<count>" when the cluster
// names no type, the node mixes types, or no node is known.
std::string gpu_gres_request(const SlurmNode* judged, std::int64_t count);

}  // namespace anvil::registry
