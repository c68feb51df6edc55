// The gates a registry recipe passes on paper before anything is pulled or launched, judged
// against this machine: GPU count and memory, context, pinning, licence, the collective path
// tensor parallelism needs, and for the embedded engine its estimated host memory (weights, KV
// cache, draft). Same verdict classes as the calculator; pure, like it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "registry/document.hpp"
#include "registry/embedded_memory.hpp"
#include "registry/feasibility.hpp"
#include "registry/inventory.hpp"

namespace anvil::registry {

// What the deployment is for. Unset: nobody has said, so a non-commercial licence stays an open question.
struct LicencePolicy {
    std::optional<bool> commercial;
};

// Hub repository → licence, from the documents that state one (external priors today).
class LicenceBook {
public:
    struct Entry {
        std::string licence;
        std::string source;  // the document that says so
    };
    void add(std::string_view repository, std::string licence, std::string source);
    void add(const ExternalPriors& priors, const std::string& source);
    // Hub repository names are case-insensitive.
    const Entry* find(std::string_view repository) const;

private:
    std::map<std::string, Entry> by_repository_;
};

// True for licences that forbid commercial use: the Creative Commons NC family and any licence
// whose name says non-commercial.
bool is_non_commercial(std::string_view licence);

// host_memory: embedded recipes only (anvil-engine holds its weights, and on the CPU its KV cache,
// in this host's memory). engine_gpu_memory: embedded recipes on GPUs (the engine's weights and
// one context of KV cache within --gpu-memory-utilization of one GPU).
enum class GateName { gpu_count, gpu_memory, context, pinning, licence, collectives, host_memory, engine_gpu_memory };
std::string_view to_string(GateName g);

struct Gate {
    GateName name = GateName::gpu_count;
    AxisStatus status = AxisStatus::unknown;  // pass | fail | unknown
    std::string reason;
};

// A model the recipe loads: its hub repository and where the recipe uses it.
struct ModelUse {
    std::string repository;  // or the local path, for a model no hub repository describes
    std::string role;        // "served model", "mounted at /draft", ...
    std::optional<std::string> declared_licence;  // what the recipe itself says (launch.model.licence)
};
// launch.model, launch.draft.model and every mount's provision block.
std::vector<ModelUse> models_of(const Recipe& recipe);
// The same, plus the record's `huggingface.repository` (not yet in the typed Recipe).
std::vector<ModelUse> models_of(const Document& doc);

struct GateContext {
    const Inventory* inventory = nullptr;        // null: nothing measured or declared
    const Requirements* requirements = nullptr;  // null: no context requirement to judge
    LicencePolicy policy;
    const LicenceBook* licences = nullptr;
    // The recipe's hardware record (memory.vram_gb, nominal decimal GB), when the registry has it.
    std::optional<double> hardware_vram_gb;
    // For embedded recipes' host_memory gate: the shape of each model a recipe names, and this
    // host's memory. Unset: the gate stays unknown.
    ModelShapeLookup model_shapes;
    std::optional<EvidenceVariable> host_memory;
};

struct RecipeAssessment {
    std::string recipe_id;
    Verdict verdict = Verdict::unresolved;
    std::vector<std::string> reasons;  // the gates that decided the verdict
    // Could this recipe be promoted once locally qualified? Never while unpinned, ruled out, or
    // under an open licence question. Even `true` authorizes nothing by itself.
    bool promotable = false;
    std::vector<std::string> promotion_blockers;
    std::vector<Gate> gates;

    json to_json() const;
};

RecipeAssessment assess_recipe(const Recipe& recipe, const PinStatus& pins, const std::vector<ModelUse>& models,
                               const GateContext& context);

}  // namespace anvil::registry
