// The record a driver keeps for each engine it starts (<state dir>/<engine id>/engine.json), so that
// a supervisor started again can find its engines and tell them from processes that reuse a pid.
#pragma once

#include <filesystem>
#include <optional>
#include <vector>

#include "engine/supervisor/driver.hpp"

namespace anvil::driver {

inline constexpr const char* kRecordFile = "engine.json";
inline constexpr const char* kRetiredRecordFile = "engine.retired.json";

// Writes the record atomically and durably (support::write_file_atomically), so a crash never leaves
// half a record, nor loses one whose engine is running.
void write_record(const EngineHandle& engine);
std::optional<EngineHandle> read_record(const std::filesystem::path& file);
// Every live record under `state_dir`, any driver; unreadable ones are logged and skipped.
std::vector<EngineHandle> list_records(const std::filesystem::path& state_dir);
// Renames the record so adoption no longer considers it; the logs stay beside it.
void retire_record(const EngineHandle& engine);

}  // namespace anvil::driver
