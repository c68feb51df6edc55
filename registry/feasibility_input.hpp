// The typed model of `anvil-serving.recipe-feasibility-input/v1` (seed 004): requirements, tracked
// variables and candidates, each number an EvidenceVariable.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "registry/evidence_variable.hpp"

namespace anvil::registry {

inline constexpr std::string_view kFeasibilityInputSchema = "anvil-serving.recipe-feasibility-input/v1";

using NamedVariables = std::vector<std::pair<std::string, EvidenceVariable>>;

enum class ReserveKind { physical, policy };

struct VramReserve {
    std::string name;
    ReserveKind kind = ReserveKind::policy;
    EvidenceVariable amount;
};

struct Requirements {
    NamedVariables tokens;  // prompt, output_reserve, and any others: T_req is their sum
    EvidenceVariable concurrency;
    EvidenceVariable physical_vram_bytes;
    std::vector<VramReserve> vram_reserves;
    NamedVariables thresholds;  // min_deterministic_pass_rate, max_relative_quality_loss, ...
};

struct FeasibilityCandidate {
    std::string id;
    std::optional<EvidenceVariable> runtime_context_limit_tokens;
    std::optional<EvidenceVariable> measured_max_stable_context_tokens;
    NamedVariables resident_components;
    NamedVariables per_sequence_components;
    NamedVariables per_token_components;
    std::optional<EvidenceVariable> kv_token_multiplier;  // absent stays absent: never defaulted to 1
    NamedVariables metrics;
    std::vector<std::string> hard_failures;
};

struct FeasibilityInput {
    std::string campaign;
    Requirements requirements;
    NamedVariables tracked_variables;
    std::vector<FeasibilityCandidate> candidates;
};

// Parses requirements (the same shape anvild's configuration uses) at `node`.
std::optional<Requirements> parse_requirements(const Node& node, JsonReader& reader);
std::optional<FeasibilityInput> parse_feasibility_input(const Node& root, JsonReader& reader);

}  // namespace anvil::registry
