#include "state/gate_table.hpp"

#include <array>

namespace anvil::state {

namespace {
// Every gate is hard today: qualification fails a revision when any gate it ran failed.
constexpr std::array<GateSpec, 6> kGates{{
    {"identity", true, GateWhen::always},
    {"smoke", true, GateWhen::always},
    {"json", true, GateWhen::always},
    {"determinism", true, GateWhen::always},
    {"tools", true, GateWhen::tools_claimed},
    {"needle", true, GateWhen::context_claimed},
}};
}  // namespace

std::span<const GateSpec> gate_table() { return kGates; }

bool runs_for(const GateSpec& gate, const GateClaims& claims) {
    switch (gate.when) {
        case GateWhen::always: return true;
        case GateWhen::tools_claimed: return claims.tools;
        case GateWhen::context_claimed: return claims.context;
    }
    return false;
}

std::vector<std::string> default_hard_gates(std::span<const GateSpec> table) {
    std::vector<std::string> out;
    for (const auto& g : table)
        if (g.hard && g.when == GateWhen::always) out.emplace_back(g.name);
    return out;
}

bool hard_gates_passed(const std::map<std::string, bool>& passed_by_gate, std::span<const GateSpec> table) {
    for (const auto& g : table) {
        if (!g.hard) continue;
        const auto it = passed_by_gate.find(std::string(g.name));
        if (it == passed_by_gate.end() ? g.when == GateWhen::always : !it->second) return false;
    }
    return true;
}

}  // namespace anvil::state
