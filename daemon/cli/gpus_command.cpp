// anvil gpus [--json]
//
// This host's GPUs as NVML measures them (kernels/gpu): UUID, name, compute capability, total,
// free and idle-used memory, PCI bus id, driver and CUDA versions. Without a driver it says so in
// one line and exits 2; --json prints the same object either way (GET /api/v1/inventory's shape).
#include <iostream>

#include "daemon/cli/arguments.hpp"
#include "daemon/cli/commands.hpp"
#include "kernels/gpu/inventory_report.hpp"
#include "kernels/gpu/nvml_inventory.hpp"

namespace anvil::cli {

int gpus_command(const std::vector<std::string>& args) {
    Arguments a(args, {}, {"--json"});
    if (!a.positional().empty()) throw UsageError("gpus takes no arguments, only --json");
    const gpu::InventoryReading reading = gpu::read_inventory();
    if (a.has("--json")) std::cout << gpu::inventory_to_json(reading).dump(2) << "\n";
    else if (reading.ok) std::cout << gpu::inventory_table(reading);
    else std::cerr << "anvil gpus: " << reading.error << "\n";
    return reading.ok ? 0 : 2;
}

}  // namespace anvil::cli
