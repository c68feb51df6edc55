// The life of a recipe revision and the guards on every move. Pure: the store gathers the facts,
// this decides. candidate → qualifying → validated → promoted → retired, with rejected (a gate
// failed) and failed (qualification failed; retried with backoff) beside them.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "state/gate_table.hpp"  // default_hard_gates(): what required_hard_gates holds

namespace anvil::state {

enum class Status { candidate, qualifying, validated, promoted, retired, rejected, failed };

std::string_view to_string(Status s);
std::optional<Status> parse_status(std::string_view s);

// Who asked: the reconciler, an API token ("api:<token id>"), or the command line.
bool is_valid_actor(std::string_view actor);

struct TransitionFacts {
    std::optional<Status> from;  // none for a new revision
    Status to;
    std::string reason;
    std::string actor;
    bool pinned = false;
    std::vector<std::string> unpinned_reasons;
    std::vector<std::string> required_hard_gates;     // default_hard_gates(), from the gate table
    std::set<std::string> hard_gates_passed_locally;  // gates with a `pass` verdict backed only by local evidence
};

// Why the transition is refused (naming the guard), or nothing when it is allowed.
std::optional<std::string> refuse_transition(const TransitionFacts& facts);

}  // namespace anvil::state
