// anvil gpus [--json] | anvil gpus --cluster [--api HOST:PORT] [--json]
//
// This host's GPUs as NVML measures them (kernels/hardware): UUID, name, compute capability, total,
// free and idle-used memory, PCI bus id, driver and CUDA versions. Without a driver it says so in
// one line and exits 2; --json prints the same object either way (GET /api/v1/inventory's shape).
// --cluster asks a running anvild instead: the Slurm nodes it places engines on, as slurmrestd
// lists them now, and the node its gates judge against.
#include <algorithm>
#include <iostream>

#include "daemon/cli/arguments.hpp"
#include "daemon/cli/commands.hpp"
#include "daemon/host/inventory_report.hpp"
#include "kernels/hardware/nvml_inventory.hpp"

namespace anvil::cli {

int gpus_command(const std::vector<std::string>& args) {
    if (std::find(args.begin(), args.end(), "--cluster") != args.end()) {
        std::vector<std::string> rest;
        for (const auto& a : args)
            if (a != "--cluster") rest.push_back(a);
        return daemon_command("gpus --cluster", rest);
    }
    Arguments a(args, {}, {"--json"});
    if (!a.positional().empty()) throw UsageError("gpus takes no arguments, only --json");
    const hardware::InventoryReading reading = hardware::read_inventory();
    if (a.has("--json")) std::cout << host::inventory_to_json(reading).dump(2) << "\n";
    else if (reading.ok) std::cout << host::inventory_table(reading);
    else std::cerr << "anvil gpus: " << reading.error << "\n";
    return reading.ok ? 0 : 2;
}

}  // namespace anvil::cli
