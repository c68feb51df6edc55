// The schema, as forward-only migrations. Version N of the file is what migrations 1..N wrote;
// PRAGMA user_version records N. Append new migrations; never edit a released one.
#pragma once

#include <string_view>
#include <vector>

#include "state/sqlite.hpp"

namespace anvil::state {

struct Migration {
    int version;
    std::string_view summary;
    std::string_view sql;
};

const std::vector<Migration>& migrations();
int current_schema_version();

// Brings the database to `target` (default: the newest) in one transaction. Refuses a file written
// by a newer anvil. Returns the version it found.
int migrate(Connection& db, int target = 0);

}  // namespace anvil::state
