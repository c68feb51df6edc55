// The qualification gates, in one table: which gates exist, which are hard, and when a plan runs
// them. Qualification runs the gates from it (daemon/qualify), the ledger's transition guard
// requires gates from it (lifecycle), and the daemon judges a revision's verdicts by it; so "hard
// gate" has one meaning. Pure: no I/O, no ledger.
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace anvil::state {

// When a qualification plan runs a gate: always, or only when the recipe claims what the gate tests.
enum class GateWhen { always, tools_claimed, context_claimed };

struct GateSpec {
    std::string_view name;
    bool hard;      // a failure keeps the revision from validated (and so from promoted)
    GateWhen when;
};

// What a recipe claims, as far as the gates care (a qualification plan's tools and needle_context).
struct GateClaims {
    bool tools = false;
    bool context = false;
};

// Every gate, in the order qualification runs them and receipts list them. identity is first: it
// learns the engine's context length, which the measurements size their prompts by.
std::span<const GateSpec> gate_table();

// Whether a plan with these claims runs `gate`.
bool runs_for(const GateSpec& gate, const GateClaims& claims);

// The hard gates a revision must pass on local evidence before the ledger's guard lets it be
// validated or promoted: the hard gates every plan runs. The ledger does not know which claims a
// revision was qualified with, so a hard gate that runs only on a claim (tools, needle) is not
// required here; it is enforced by qualification instead, which fails the revision when it fails.
std::vector<std::string> default_hard_gates(std::span<const GateSpec> table = gate_table());

// Whether gate results pass the hard gates: every hard gate every plan runs has passed, and no hard
// gate that ran failed. `passed_by_gate` maps a gate's name to whether its (newest) result passed;
// names the table does not hold (feasibility, startup) and gates that are not hard are ignored.
bool hard_gates_passed(const std::map<std::string, bool>& passed_by_gate, std::span<const GateSpec> table = gate_table());

}  // namespace anvil::state
