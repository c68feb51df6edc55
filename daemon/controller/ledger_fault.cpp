#include "daemon/controller/ledger_fault.hpp"

#include <sqlite3.h>
#include <sys/statvfs.h>

#include <algorithm>

namespace anvil::daemon {

LedgerFault ledger_fault(int sqlite_code, const std::string& message) {
    switch (sqlite_code & 0xff) {
        case SQLITE_FULL:
            return {"DiskFull", "the ledger cannot be written: the disk is full (" + message + "); free space in the data directory's filesystem"};
        case SQLITE_READONLY:
        case SQLITE_PERM:
        case SQLITE_CANTOPEN:
            return {"ReadOnly", "the ledger cannot be written: " + message + "; make the data directory writable for anvild"};
        default:
            return {"IOError", "the ledger cannot be written: " + message + "; check the data directory's device"};
    }
}

std::optional<LedgerFault> low_space_fault(std::uint64_t available, const std::filesystem::path& data_dir) {
    if (available >= kLedgerReserveBytes) return std::nullopt;
    return LedgerFault{"DiskFull", "the ledger cannot be written safely: " + data_dir.string() + " has " + std::to_string(available) +
                                       " bytes left (anvild keeps " + std::to_string(kLedgerReserveBytes) +
                                       " in reserve); free space in its filesystem"};
}

std::chrono::milliseconds ledger_retry_delay(int failures) {
    const int doublings = std::clamp(failures - 1, 0, 6);
    return std::min<std::chrono::milliseconds>(std::chrono::seconds(1) * (1 << doublings), std::chrono::seconds(60));
}

std::optional<std::uint64_t> available_bytes(const std::filesystem::path& dir) {
    struct statvfs fs {};
    if (::statvfs(dir.c_str(), &fs) != 0) return std::nullopt;
    return static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
}

}  // namespace anvil::daemon
