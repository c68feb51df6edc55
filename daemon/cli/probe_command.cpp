// anvil probe collectives [--gpus UUID,UUID…] [--deadline S] [--receipts DIR] [--max-bytes N] [--json]
//
// Runs anvil-collective-probe (kernels/hardware) as a child over the chosen GPUs (all of them when
// --gpus is absent): an NCCL communicator, bounded all-reduces from 1 KiB to 256 MiB, checked and
// timed. A probe still running at the deadline is killed with its process group and recorded as a
// failure with NCCL's diagnostics. Either way the outcome is written as a receipt (path and sha256
// printed): the evidence for the tensor-parallel gate. Exit 0 proven, 1 failed, 2 could not run.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <set>
#include <sstream>

#include <fmt/ranges.h>

#include "daemon/cli/arguments.hpp"
#include "daemon/cli/commands.hpp"
#include "kernels/hardware/collective_probe.hpp"
#include "daemon/host/inventory_report.hpp"
#include "kernels/hardware/nvml_inventory.hpp"

namespace anvil::cli {

namespace {

std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream in(s);
    for (std::string word; std::getline(in, word, ',');)
        if (!word.empty()) out.push_back(word);
    return out;
}

double positive_number(const std::string& flag, const std::string& text) {
    std::size_t used = 0;
    double v = 0;
    try {
        v = std::stod(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != text.size() || !(v > 0)) throw UsageError(flag + " expects a positive number, found '" + text + "'");
    return v;
}

std::string fixed(double v, int digits) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return buf;
}

// Could not run: one line (or the JSON object with the reason), exit 2.
int cannot_run(bool json, const std::string& message) {
    if (json) std::cout << nlohmann::json{{"ok", false}, {"error", message}}.dump(2) << "\n";
    else std::cerr << "anvil probe collectives: " << message << "\n";
    return 2;
}

void print_outcome(const hardware::ProbeOutcome& o, const hardware::WrittenReceipt& receipt) {
    const auto& r = o.result.is_object() ? o.result : nlohmann::json::object();
    const auto version = [&](const char* key) { return r.value(key, std::string("?")); };
    if (o.ok) {
        std::cout << "collectives proven over " << r["ranks"].size() << " GPU" << (r["ranks"].size() == 1 ? "" : "s") << " in "
                  << fixed(o.seconds, 1) << " s: NCCL " << version("nccl_version") << ", CUDA runtime " << version("cuda_runtime_version")
                  << ", driver CUDA " << version("cuda_driver_version") << ", transport "
                  << (o.transports.empty() ? std::string(r["ranks"].size() == 1 ? "none (single rank)" : "not reported")
                                           : fmt::format("{}", fmt::join(o.transports, ", ")))
                  << "\n";
        for (const auto& rank : r["ranks"])
            std::cout << "  rank " << rank.value("rank", -1) << " → " << rank.value("uuid", "?") << " (CUDA device "
                      << rank.value("cuda_device", -1) << ", " << rank.value("name", "?") << ", " << rank.value("pci_bus_id", "?") << ")\n";
        std::cout << "  bytes        algbw GB/s  busbw GB/s\n";
        for (const auto& s : r["results"]) {
            std::string bytes = std::to_string(s.value("bytes", std::int64_t{0}));
            bytes.resize(std::max<std::size_t>(bytes.size(), 12), ' ');
            std::cout << "  " << bytes << " " << fixed(s.value("algbw_gbps", 0.0), 2) << "  " << fixed(s.value("busbw_gbps", 0.0), 2) << "\n";
        }
    } else {
        std::cerr << "anvil probe collectives: " << o.error << "\n";
        for (const auto& line : o.diagnostics) std::cerr << "  | " << line << "\n";
    }
    std::cout << "receipt " << receipt.path.string() << " sha256 " << receipt.sha256 << "\n";
}

}  // namespace

int probe_command(const std::vector<std::string>& args) {
    Arguments a(args, {"--gpus", "--deadline", "--receipts", "--max-bytes", "--data-dir"}, {"--json"});
    if (a.positional().size() != 1 || a.positional()[0] != "collectives")
        throw UsageError("probe takes one subject: collectives");
    const bool json = a.has("--json");
    hardware::ProbeRequest request;
    if (auto d = a.value("--deadline"))
        // At least 1 ms: a zero deadline would mean none.
        request.deadline = std::chrono::milliseconds(std::max<std::int64_t>(1, static_cast<std::int64_t>(positive_number("--deadline", *d) * 1000)));
    else request.deadline = std::chrono::seconds(30);
    if (auto m = a.value("--max-bytes")) {
        const double v = positive_number("--max-bytes", *m);
        std::int64_t top = request.min_bytes;
        while (top * 2 <= static_cast<std::int64_t>(v)) top *= 2;
        if (static_cast<double>(top) != v)
            throw UsageError("--max-bytes must be 1024 times a power of two (1024, 2048, … 268435456), found '" + *m + "'");
        request.max_bytes = top;
    }

    const hardware::InventoryReading inventory = hardware::read_inventory();
    if (!inventory.ok) return cannot_run(json, "cannot probe collectives: " + inventory.error);
    std::set<std::string> present;
    for (const auto& g : inventory.gpus) present.insert(g.uuid);
    if (auto list = a.value("--gpus")) {
        request.gpus = split_list(*list);
    } else {
        for (const auto& g : inventory.gpus) request.gpus.push_back(g.uuid);
    }
    if (request.gpus.empty()) return cannot_run(json, "cannot probe collectives: NVML lists no GPU on this host");
    std::set<std::string> seen;
    for (const auto& uuid : request.gpus) {
        if (!present.count(uuid)) {
            throw UsageError(fmt::format("--gpus: {} is not a GPU of this host (`anvil gpus` lists them: {})", uuid, fmt::join(present, ", ")));
        }
        if (!seen.insert(uuid).second) throw UsageError("--gpus: " + uuid + " is listed twice");
    }
    const auto probe = hardware::find_probe();
    if (!probe)
        return cannot_run(json, std::string("this anvil was built without CUDA and NCCL: ") + hardware::kProbeExecutable +
                                    " is not beside it (install it there, or set ANVIL_COLLECTIVE_PROBE to its path)");
    request.probe = *probe;

    const hardware::ProbeOutcome outcome = hardware::run_collective_probe(request);
    const nlohmann::json receipt_json = hardware::probe_receipt(request, outcome, host::inventory_to_json(inventory));
    const std::filesystem::path dir = a.value("--receipts")
                                          ? std::filesystem::path(*a.value("--receipts"))
                                          : std::filesystem::path(a.value_or("--data-dir", default_data_dir())) / "receipts" / "collectives";
    const hardware::WrittenReceipt receipt = hardware::write_probe_receipt(dir, receipt_json);
    if (json) {
        nlohmann::json out = receipt_json;
        out["ok"] = outcome.ok;
        out["receipt"] = {{"path", receipt.path.string()}, {"sha256", receipt.sha256}};
        std::cout << out.dump(2) << "\n";
    } else {
        print_outcome(outcome, receipt);
    }
    return outcome.ok ? 0 : 1;
}

}  // namespace anvil::cli
