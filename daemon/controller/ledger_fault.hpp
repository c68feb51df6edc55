// What the controller does while the ledger cannot be written (a full disk, a read-only or failing
// device): the rules, pure. A pass that writes is tried again after a delay that doubles up to a
// bound, not every second; a filesystem with less than a reserve left is taken as full before a
// write fails; and the condition says which of these it is and what to do.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace anvil::daemon {

struct LedgerFault {
    std::string reason;   // condition reason: DiskFull, ReadOnly, IOError
    std::string message;  // one line: what failed and what to do
};

// Free bytes under this in the data directory's filesystem are taken as a full disk.
inline constexpr std::uint64_t kLedgerReserveBytes = 1u << 20;

// The fault a failed write with this SQLite code and message means.
LedgerFault ledger_fault(int sqlite_code, const std::string& message);
// The fault a filesystem with `available` bytes left means, or nothing when it has room.
std::optional<LedgerFault> low_space_fault(std::uint64_t available, const std::filesystem::path& data_dir);
// How long after its `failures`-th failed attempt the next pass that writes runs: 1 s, doubling, at most 60 s.
std::chrono::milliseconds ledger_retry_delay(int failures);
// The bytes an unprivileged writer may still use under `dir`, or nothing when it cannot be read.
std::optional<std::uint64_t> available_bytes(const std::filesystem::path& dir);

}  // namespace anvil::daemon
