// UTC timestamps as ISO 8601 text: one format for the ledger, receipts, evidence and file names.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace anvil::support {

enum class Precision { seconds, milliseconds };

// Extended form: "2026-11-30T06:14:00.123Z", or "2026-11-30T06:14:00Z" to the second.
std::string format_utc(std::chrono::system_clock::time_point t, Precision precision = Precision::milliseconds);
std::string utc_now(Precision precision = Precision::milliseconds);

// Basic form, for file names (no ':'), still sorting by time: "20261130T061400Z",
// or "20261130T061400.123Z".
std::string format_utc_compact(std::chrono::system_clock::time_point t, Precision precision = Precision::seconds);

// Reads the extended form back: "YYYY-MM-DDTHH:MM:SS", then an optional fraction (kept to the
// millisecond) and an optional 'Z'; nothing else may follow. nullopt for anything else, or a
// date or time that does not exist.
std::optional<std::chrono::system_clock::time_point> parse_utc(std::string_view text);

}  // namespace anvil::support
