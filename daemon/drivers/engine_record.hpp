// The record a driver keeps for each engine it starts (<state dir>/<engine id>/engine.json), so that
// a supervisor started again can find its engines and tell them from processes that reuse a pid.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "daemon/drivers/driver.hpp"

namespace anvil::drivers {

inline constexpr const char* kRecordFile = "engine.json";
inline constexpr const char* kRetiredRecordFile = "engine.retired.json";

// A new engine's handle: a fresh id ("<recipe id>-<8 hex>"), the driver kind, what it serves and its
// key from the launch, and its own directory under `state_dir` (created) with engine.log in it.
EngineHandle new_engine_handle(const std::string& driver_kind, const RecipeRevision& recipe, const ResolvedLaunch& launch,
                               const std::filesystem::path& state_dir);

// Writes the record atomically and durably (support::write_file_atomically), so a crash never leaves
// half a record, nor loses one whose engine is running.
void write_record(const EngineHandle& engine);
std::optional<EngineHandle> read_record(const std::filesystem::path& file);
// Every live record under `state_dir`, any driver; unreadable ones are logged and skipped.
std::vector<EngineHandle> list_records(const std::filesystem::path& state_dir);
// Renames the record so adoption no longer considers it; the logs stay beside it.
void retire_record(const EngineHandle& engine);

}  // namespace anvil::drivers
