// The hard gates: each runs Plan::attempts attempts against the engine and passes when
// passed / attempts >= Plan::min_pass_rate. An attempt that fails says why in one line.
#pragma once

#include <string_view>

#include "daemon/qualify/run_context.hpp"

namespace anvil::qualify::detail {

GateOutcome identity_gate(RunContext& run);     // also learns max_model_len for the measurements
GateOutcome smoke_gate(RunContext& run);
GateOutcome json_gate(RunContext& run);
GateOutcome determinism_gate(RunContext& run);
GateOutcome tools_gate(RunContext& run);        // only when Plan::tools
GateOutcome needle_gate(RunContext& run);       // only when Plan::needle_context

// The function that runs the gate named in state::gate_table(), or nullptr for a name with none.
using GateFunction = GateOutcome (*)(RunContext&);
GateFunction gate_function(std::string_view name);

}  // namespace anvil::qualify::detail
