// What tests and tools check a ledger with, kept out of the Store's production interface: the
// status cache beside the same statuses rebuilt from the transitions alone, SQLite's integrity
// check, the transitions in order, and settings written raw (a malformed one, as a bad disk or an
// older anvild could leave it).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "state/store.hpp"

namespace anvil::state {

class Inspection {
public:
    explicit Inspection(Store& store) : store_(store) {}

    // The status cache, and the same thing recomputed from the transition ledger alone.
    std::map<Id, Status> statuses() const { return store_.statuses(); }
    std::map<Id, Status> statuses_from_ledger() const { return store_.statuses_from_ledger(); }
    // "ok", or what PRAGMA integrity_check found.
    std::string integrity_check() const { return store_.integrity_check(); }
    // Transitions after `cursor` (their id), oldest first.
    std::vector<TransitionRow> transitions_since(Id cursor, int limit = 1000) const { return store_.transitions_since(cursor, limit); }
    // A setting as stored, and one written whatever its shape.
    std::optional<nlohmann::json> setting(const std::string& key) const { return store_.setting(key); }
    void set_setting(const std::string& key, const nlohmann::json& value, const std::string& actor) {
        store_.set_setting(key, value, actor);
    }

private:
    Store& store_;
};

}  // namespace anvil::state
