#include "state/lifecycle.hpp"

#include <array>
#include <map>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace anvil::state {

namespace {
constexpr std::array<std::pair<Status, std::string_view>, 7> kNames{{
    {Status::candidate, "candidate"},
    {Status::qualifying, "qualifying"},
    {Status::validated, "validated"},
    {Status::promoted, "promoted"},
    {Status::retired, "retired"},
    {Status::rejected, "rejected"},
    {Status::failed, "failed"},
}};

// Edges of the lifecycle. retired → promoted is a rollback; rejected → candidate is a re-evaluation
// after the evidence or the machine changed; anything not promoted may be retired when superseded.
// retired → candidate: the same bytes are back in the registry (a revert, or a force-push back).
const std::map<Status, std::set<Status>>& edges() {
    using S = Status;
    static const std::map<S, std::set<S>> all{
        {S::candidate, {S::qualifying, S::rejected, S::retired}},
        {S::qualifying, {S::validated, S::failed, S::rejected, S::retired}},
        {S::validated, {S::promoted, S::qualifying, S::rejected, S::retired}},
        {S::promoted, {S::retired}},
        {S::retired, {S::promoted, S::candidate}},
        {S::rejected, {S::candidate, S::retired}},
        {S::failed, {S::qualifying, S::rejected, S::retired}},
    };
    return all;
}

}  // namespace

std::string_view to_string(Status s) {
    for (const auto& [status, name] : kNames)
        if (status == s) return name;
    return "candidate";
}

std::optional<Status> parse_status(std::string_view s) {
    for (const auto& [status, name] : kNames)
        if (name == s) return status;
    return std::nullopt;
}

bool is_valid_actor(std::string_view actor) {
    return actor == "reconciler" || actor == "cli" || (actor.starts_with("api:") && actor.size() > 4);
}

std::optional<std::string> refuse_transition(const TransitionFacts& f) {
    // Built only for a refusal: an allowed move (the common case) costs no string.
    auto move = [&f] { return std::string(f.from ? to_string(*f.from) : "(new)") + " → " + std::string(to_string(f.to)); };
    if (!is_valid_actor(f.actor))
        return "actor guard: '" + f.actor + "' is not reconciler, cli or api:<token id>";
    if (f.reason.empty()) return "reason guard: every transition needs a reason (" + move() + ")";
    if (!f.from) {
        if (f.to != Status::candidate) return "lifecycle guard: a new revision starts as candidate, not " + std::string(to_string(f.to));
        return std::nullopt;
    }
    const auto& allowed = edges().at(*f.from);
    if (!allowed.count(f.to)) return "lifecycle guard: " + move() + " is not a legal move";

    if (f.to == Status::validated || f.to == Status::promoted) {
        std::vector<std::string> missing;
        for (const auto& gate : f.required_hard_gates)
            if (!f.hard_gates_passed_locally.count(gate)) missing.push_back(gate);
        if (!missing.empty())
            return "evidence guard: " + move() + " needs a local pass for every hard gate; missing: " + fmt::format("{}", fmt::join(missing, "; "));
    }
    if (f.to == Status::promoted && !f.pinned)
        return "pinning guard: an unpinned revision can never be promoted (" + fmt::format("{}", fmt::join(f.unpinned_reasons, "; ")) + ")";
    return std::nullopt;
}

}  // namespace anvil::state
