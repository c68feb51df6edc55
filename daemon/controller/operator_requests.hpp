// What an operator asks for through the API, on the API's threads: each request is checked,
// recorded in the ledger as intent (a setting, or a revision moved to `qualifying`), and the pass is
// woken to act on it. No request promotes or starts anything itself: the pass is the only actor,
// so two can never race. A request the controller will not carry out throws RequestRefused, in
// the domain's terms (not found, conflict); the API maps them to HTTP.
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "daemon/controller/controller_ports.hpp"
#include "state/ledger.hpp"

namespace anvil::daemon {

struct RequestRefused : std::runtime_error {
    enum class Why { not_found, conflict };
    Why why;
    RequestRefused(Why w, const std::string& message) : std::runtime_error(message), why(w) {}
};

class OperatorRequests {
public:
    // Why a revision's document is not at the synced commit of its source, or nothing when it is.
    using InRegistry = std::function<std::optional<std::string>(const state::RevisionRow&)>;
    OperatorRequests(state::RevisionLedger& revisions, state::SettingsLedger& settings, const Qualifications& qualifications,
                     const Clock& clock, InRegistry in_registry, std::function<void()> sync, std::function<void()> wake)
        : revisions_(revisions), settings_(settings), qualifications_(qualifications), clock_(clock), in_registry_(std::move(in_registry)), sync_(std::move(sync)),
          wake_(std::move(wake)) {}

    // Every source read again at the next pass, due or not.
    void request_sync() { sync_(); }
    // The recipe's newest revision (candidate, failed or validated, at the synced commit) to `qualifying`.
    void request_qualification(const std::string& recipe_id, const std::string& actor);
    // Pins the recipe's newest validated revision as the default; nothing: releases the pin.
    void pin(const std::optional<std::string>& recipe_id, const std::string& actor);
    void freeze(const std::string& reason, const std::string& actor);
    void unfreeze(const std::string& actor);

private:
    state::RevisionLedger& revisions_;
    state::SettingsLedger& settings_;
    const Qualifications& qualifications_;
    const Clock& clock_;
    InRegistry in_registry_;
    std::function<void()> sync_;
    std::function<void()> wake_;
};

}  // namespace anvil::daemon
