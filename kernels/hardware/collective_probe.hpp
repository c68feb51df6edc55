// The collective probe, parent side: runs anvil-collective-probe (an NCCL all-reduce over the
// chosen GPUs, see probe_main.cpp) as a child with a deadline, reads its one JSON result and NCCL's
// own log from its stderr, and writes the outcome as a receipt: evidence for the tensor-parallel
// gate (the daemon reads receipts into the registry's inventory: daemon/host). NCCL settings are given to the child's environment only.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace anvil::hardware {

inline constexpr const char* kProbeExecutable = "anvil-collective-probe";
// Lines the probe writes to stderr before each step, so a hang can be placed.
inline constexpr std::string_view kStageMarker = "anvil-collective-probe: stage: ";

struct ProbeRequest {
    std::filesystem::path probe;       // the anvil-collective-probe executable
    std::vector<std::string> gpus;     // GPU UUIDs in rank order
    std::chrono::milliseconds deadline{std::chrono::seconds(60)};
    std::int64_t min_bytes = 1024;              // all-reduce sizes double from here…
    std::int64_t max_bytes = 256ll << 20;       // …to here
};

struct ProbeOutcome {
    bool ok = false;
    std::string error;                       // one line, when !ok
    bool timed_out = false;
    int exit_code = -1;
    double seconds = 0;
    std::string stage;                       // the last step the probe announced
    nlohmann::json result;                   // the probe's JSON (null when it printed none)
    std::vector<std::string> transports;     // from NCCL's INFO lines: "P2P/CUMEM/read", "SHM/direct/direct", …
    std::vector<std::string> diagnostics;    // NCCL's WARN lines, then the last lines of its stderr
    std::map<std::string, std::string> child_settings;  // what was set in the child's environment only
};

// $ANVIL_COLLECTIVE_PROBE, else anvil-collective-probe beside this process's executable.
std::optional<std::filesystem::path> find_probe();

// This process's environment plus NCCL_DEBUG=INFO (its log names the transports and explains
// failures) and CUDA_VISIBLE_DEVICES=<the GPUs>, for the child only.
std::map<std::string, std::string> probe_environment(const std::vector<std::string>& gpus,
                                                     std::map<std::string, std::string>* settings = nullptr);

ProbeOutcome run_collective_probe(const ProbeRequest& request);

// Transports NCCL reports connecting its channels with ("… NCCL INFO Channel 00/0 : 0[0] -> 1[1]
// via P2P/CUMEM/read"), each once, in order of first appearance.
std::vector<std::string> nccl_transports(std::string_view log);
// NCCL's WARN lines and the last `tail` lines of the log (each line at most 400 characters).
std::vector<std::string> nccl_diagnostics(std::string_view log, std::size_t tail = 20);

// What the receipt says the probe showed of the GPUs' all-reduce path: "proven" or "failed".
std::string_view probe_verdict(const ProbeOutcome& outcome);

// {"kind": "anvil-collective-probe-receipt/v1", "outcome", "error"?, "gpus", "deadline_s", "seconds",
//  "timed_out", "exit_code", "stage", "nccl_version", "cuda_runtime_version", "cuda_driver_version",
//  "ranks", "results", "transports", "diagnostics", "child_environment", "inventory"?, "written_at"}
nlohmann::json probe_receipt(const ProbeRequest& request, const ProbeOutcome& outcome, const nlohmann::json& inventory);

struct WrittenReceipt {
    std::filesystem::path path;
    std::string sha256;  // of the bytes on disk, 64 lowercase hex digits
};
// <dir>/collectives-<UTC time>.json, written to a temporary file, fsynced and renamed into place.
// Throws std::runtime_error naming the path and the system's reason.
WrittenReceipt write_probe_receipt(const std::filesystem::path& dir, const nlohmann::json& receipt);

// The newest receipt under `dir` (names sort by their UTC time), parsed, with its path and sha256;
// nullopt when there is none or it cannot be read as JSON.
struct ReadReceipt {
    std::filesystem::path path;
    std::string sha256;
    nlohmann::json receipt;
};
std::optional<ReadReceipt> latest_probe_receipt(const std::filesystem::path& dir);

}  // namespace anvil::hardware
