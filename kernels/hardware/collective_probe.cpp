#include "kernels/hardware/collective_probe.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "support/atomic_file.hpp"
#include "support/child.hpp"
#include "support/clock.hpp"
#include "support/digest.hpp"

namespace anvil::hardware {

namespace {

std::vector<std::string_view> lines_of(std::string_view log) {
    std::vector<std::string_view> lines;
    while (!log.empty()) {
        const std::size_t eol = log.find('\n');
        std::string_view line = log.substr(0, eol);
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
        if (!line.empty()) lines.push_back(line);
        log.remove_prefix(eol == std::string_view::npos ? log.size() : eol + 1);
    }
    return lines;
}

std::string clip(std::string_view line) {
    constexpr std::size_t kMax = 400;
    return line.size() <= kMax ? std::string(line) : std::string(line.substr(0, kMax)) + "…";
}

// Checks what the probe says against what was asked: every rank, every size, every result verified.
std::string judge(const ProbeRequest& request, const nlohmann::json& result) {
    if (!result.is_object()) return "the probe printed no result";
    if (!result.value("ok", false)) return result.value("error", std::string("the probe failed without saying why"));
    const auto& ranks = result.value("ranks", nlohmann::json::array());
    if (ranks.size() != request.gpus.size())
        return "the probe ran " + std::to_string(ranks.size()) + " ranks for " + std::to_string(request.gpus.size()) + " GPUs";
    for (std::size_t i = 0; i < ranks.size(); ++i)
        if (ranks[i].value("uuid", std::string()) != request.gpus[i])
            return "rank " + std::to_string(i) + " ran on " + ranks[i].value("uuid", std::string("?")) + ", not " + request.gpus[i];
    std::int64_t expected = request.min_bytes;
    const auto& results = result.value("results", nlohmann::json::array());
    for (const auto& r : results) {
        if (r.value("bytes", std::int64_t{-1}) != expected)
            return "the probe's sizes skip " + std::to_string(expected) + " bytes";
        if (!r.value("verified", false)) return "all-reduce of " + std::to_string(expected) + " bytes gave wrong sums";
        expected *= 2;
    }
    if (results.empty() || expected / 2 != request.max_bytes)
        return "the probe stopped before " + std::to_string(request.max_bytes) + " bytes";
    return {};
}

}  // namespace

std::optional<std::filesystem::path> find_probe() {
    if (const char* p = std::getenv("ANVIL_COLLECTIVE_PROBE"); p && *p) return std::filesystem::path(p);
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) return std::nullopt;
    const auto beside = self.parent_path() / kProbeExecutable;
    if (::access(beside.c_str(), X_OK) == 0) return beside;
    return std::nullopt;
}

std::map<std::string, std::string> probe_environment(const std::vector<std::string>& gpus,
                                                     std::map<std::string, std::string>* settings) {
    std::map<std::string, std::string> set{{"NCCL_DEBUG", "INFO"}, {"CUDA_VISIBLE_DEVICES", fmt::format("{}", fmt::join(gpus, ","))}};
    auto env = support::current_environment();
    for (const auto& [k, v] : set) env[k] = v;
    if (settings) *settings = set;
    return env;
}

std::vector<std::string> nccl_transports(std::string_view log) {
    std::vector<std::string> out;
    for (std::string_view line : lines_of(log)) {
        const std::size_t info = line.find("NCCL INFO Channel");
        if (info == std::string_view::npos) continue;
        const std::size_t via = line.find(" via ", info);
        if (via == std::string_view::npos) continue;
        std::string transport(line.substr(via + 5));
        if (!transport.empty() && std::find(out.begin(), out.end(), transport) == out.end()) out.push_back(transport);
    }
    return out;
}

std::vector<std::string> nccl_diagnostics(std::string_view log, std::size_t tail) {
    const auto lines = lines_of(log);
    std::vector<std::string> out;
    const std::size_t tail_from = lines.size() > tail ? lines.size() - tail : 0;
    for (std::size_t i = 0; i < tail_from; ++i)
        if (lines[i].find("NCCL WARN") != std::string_view::npos) out.push_back(clip(lines[i]));
    for (std::size_t i = tail_from; i < lines.size(); ++i) out.push_back(clip(lines[i]));
    return out;
}

ProbeOutcome run_collective_probe(const ProbeRequest& request) {
    ProbeOutcome o;
    std::vector<std::string> argv{request.probe.string(), "--gpus", fmt::format("{}", fmt::join(request.gpus, ",")), "--min-bytes",
                                  std::to_string(request.min_bytes), "--max-bytes", std::to_string(request.max_bytes)};
    const auto env = probe_environment(request.gpus, &o.child_settings);
    spdlog::info("collective probe: {} over {} GPUs, deadline {} ms", request.probe.string(), request.gpus.size(), request.deadline.count());
    // NCCL's INFO log of a many-GPU init runs to hundreds of KiB; keep enough to hold the channel lines.
    const support::ChildResult run = support::run_child(argv, env, request.deadline, 16u << 20);
    o.exit_code = run.exit_code;
    o.timed_out = run.timed_out;
    o.seconds = run.seconds;
    o.transports = nccl_transports(run.err);
    o.diagnostics = nccl_diagnostics(run.err);
    for (std::string_view line : lines_of(run.err))
        if (const std::size_t at = line.find(kStageMarker); at != std::string_view::npos)
            o.stage = std::string(line.substr(at + kStageMarker.size()));
    // The result is the last line of stdout that parses as a JSON object.
    for (auto line : lines_of(run.out)) {
        auto parsed = nlohmann::json::parse(line, nullptr, false);
        if (parsed.is_object()) o.result = std::move(parsed);
    }
    if (run.exec_failed) {
        o.error = run.err;
    } else if (run.timed_out) {
        char secs[32];
        std::snprintf(secs, sizeof secs, "%.1f", std::chrono::duration<double>(request.deadline).count());
        o.error = std::string("the collective probe did not finish within its ") + secs + " s deadline and was killed" +
                  (o.stage.empty() ? "" : " during " + o.stage) + "; NCCL's diagnostics follow";
    } else if (std::string why = judge(request, o.result); !why.empty()) {
        o.error = "collective probe failed: " + why;
        if (o.result.is_null() && run.exit_code != 0)
            o.error += " (exit " + std::to_string(run.exit_code) + (o.stage.empty() ? "" : ", during " + o.stage) + ")";
    } else if (run.exit_code != 0) {
        o.error = "collective probe exited " + std::to_string(run.exit_code) + " after a passing result";
    } else {
        o.ok = true;
    }
    return o;
}

std::string_view probe_verdict(const ProbeOutcome& outcome) { return outcome.ok ? "proven" : "failed"; }

nlohmann::json probe_receipt(const ProbeRequest& request, const ProbeOutcome& outcome, const nlohmann::json& inventory) {
    const nlohmann::json& r = outcome.result.is_object() ? outcome.result : nlohmann::json::object();
    nlohmann::json receipt{{"kind", "anvil-collective-probe-receipt/v1"},
                           {"written_at", support::utc_now(support::Precision::seconds)},
                           {"outcome", std::string(probe_verdict(outcome))},
                           {"gpus", request.gpus},
                           {"sizes_bytes", {{"min", request.min_bytes}, {"max", request.max_bytes}}},
                           {"deadline_s", std::chrono::duration<double>(request.deadline).count()},
                           {"seconds", outcome.seconds},
                           {"timed_out", outcome.timed_out},
                           {"exit_code", outcome.exit_code},
                           {"stage", outcome.stage},
                           {"probe", request.probe.string()},
                           {"nccl_version", r.value("nccl_version", nlohmann::json())},
                           {"cuda_runtime_version", r.value("cuda_runtime_version", nlohmann::json())},
                           {"cuda_driver_version", r.value("cuda_driver_version", nlohmann::json())},
                           {"ranks", r.value("ranks", nlohmann::json::array())},
                           {"results", r.value("results", nlohmann::json::array())},
                           {"transports", outcome.transports},
                           {"diagnostics", outcome.diagnostics},
                           {"child_environment", outcome.child_settings}};
    if (!outcome.ok) receipt["error"] = outcome.error;
    if (!inventory.is_null()) receipt["inventory"] = inventory;
    return receipt;
}

WrittenReceipt write_probe_receipt(const std::filesystem::path& dir, const nlohmann::json& receipt) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw std::runtime_error(dir.string() + ": cannot create the receipt directory: " + ec.message());
    const std::string bytes = receipt.dump(2) + "\n";
    const std::string stamp = support::format_utc_compact(std::chrono::system_clock::now());
    std::filesystem::path path = dir / ("collectives-" + stamp + ".json");
    for (int n = 1; std::filesystem::exists(path); ++n) path = dir / ("collectives-" + stamp + "-" + std::to_string(n) + ".json");
    support::write_file_atomically(path, bytes, 0644);
    return {path, support::sha256_hex(bytes)};
}

std::optional<ReadReceipt> latest_probe_receipt(const std::filesystem::path& dir) {
    std::error_code ec;
    std::optional<std::filesystem::path> newest;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (!name.starts_with("collectives-") || !name.ends_with(".json")) continue;
        if (!newest || name > newest->filename().string()) newest = entry.path();
    }
    if (!newest) return std::nullopt;
    std::ifstream in(*newest, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    auto parsed = nlohmann::json::parse(bytes.str(), nullptr, false);
    if (!in || !parsed.is_object()) {
        spdlog::warn("collective probe receipt {} cannot be read as JSON: ignored", newest->string());
        return std::nullopt;
    }
    return ReadReceipt{*newest, support::sha256_hex(bytes.str()), std::move(parsed)};
}

}  // namespace anvil::hardware
