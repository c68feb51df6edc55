// The GPU inventory: NVML's answers (kernels/hardware) become measured evidence (daemon/host), a host without a
// driver says so plainly, and `anvil gpus` shows either. A stand-in libnvidia-ml (tests/tools/
// gpu_fake_nvml.cpp) answers for two GPUs, so the dlopen, symbol and mapping code runs for real.
#include <algorithm>
#include <cstdlib>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "daemon/host/host_inventory.hpp"
#include "daemon/host/inventory_report.hpp"
#include "kernels/hardware/nvml_inventory.hpp"
#include "registry/feasibility_input.hpp"
#include "test_support.hpp"

using anvil::hardware::read_inventory;
using anvil::registry::EvidenceStatus;
using anvil::test::run;

namespace {

std::int64_t bytes(const anvil::registry::EvidenceVariable& v) { return std::get<std::int64_t>(*v.value); }

// Sets an environment variable for one scope (the fake NVML reads its switches at each call).
struct ScopedEnv {
    const char* name;
    ScopedEnv(const char* n, const char* value) : name(n) { ::setenv(n, value, 1); }
    ~ScopedEnv() { ::unsetenv(name); }
};

}  // namespace

TEST_CASE("NVML's answers become a measured inventory, GPU by GPU", "[gpu][inventory]") {
    const auto r = read_inventory(ANVIL_FAKE_NVML);
    INFO(r.error);
    REQUIRE(r.ok);
    CHECK(r.notes.empty());
    CHECK(r.gpus.size() == 2);
    const auto inv = anvil::host::measured_inventory(r);
    CHECK(inv.source == std::string("NVML (") + ANVIL_FAKE_NVML + ")");
    CHECK(inv.driver_version == "580.95.05");
    CHECK(inv.cuda_driver_version == "13.0");
    REQUIRE(inv.gpus.size() == 2);

    const auto& h200 = inv.gpus[0];
    CHECK(h200.index == 0);
    CHECK(h200.uuid == "GPU-11111111-2222-3333-4444-555555555555");
    CHECK(h200.name == "NVIDIA H200");
    CHECK(h200.compute_capability == "9.0");
    CHECK(h200.pci_bus_id == "00000000:19:00.0");
    CHECK(bytes(h200.total_bytes) == 150754820096);
    CHECK(h200.free_bytes == 150223650816);
    CHECK(bytes(h200.idle_used_bytes) == 150754820096 - 150223650816);  // total − free: not ours to use
    CHECK(h200.total_bytes.status == EvidenceStatus::measured);
    CHECK(h200.idle_used_bytes.status == EvidenceStatus::measured);
    CHECK(h200.total_bytes.observed_at == r.observed_at);
    CHECK_THAT(h200.total_bytes.source, Catch::Contains("NVML GPU-11111111-2222-3333-4444-555555555555"));

    const auto& pro = inv.gpus[1];
    CHECK(pro.index == 1);
    CHECK(pro.name == "NVIDIA RTX PRO 6000 Blackwell Workstation Edition");
    CHECK(pro.compute_capability == "12.0");
    CHECK(pro.pci_bus_id == "00000000:5A:00.0");

    // What feasibility reads: the sums, measured.
    CHECK(inv.evidence() == EvidenceStatus::measured);
    CHECK(bytes(inv.total_vram()) == 150754820096 + 102641664000);
    CHECK(bytes(inv.idle_allocations()) == (150754820096 - 150223650816) + (102641664000 - 101000000000));
    const auto requirements = anvil::registry::with_inventory({}, inv);
    CHECK(bytes(requirements.physical_vram_bytes) == 150754820096 + 102641664000);
    CHECK(requirements.physical_vram_bytes.status == EvidenceStatus::measured);
}

TEST_CASE("The inventory's JSON carries every figure per GPU, and the sums feasibility reads", "[gpu][inventory]") {
    const auto j = anvil::host::inventory_to_json(read_inventory(ANVIL_FAKE_NVML));
    CHECK(j["available"] == true);
    CHECK_FALSE(j.contains("error"));
    CHECK(j["driver_version"] == "580.95.05");
    REQUIRE(j["gpus"].size() == 2);
    const auto& g = j["gpus"][1];
    CHECK(g["index"] == 1);
    CHECK(g["uuid"] == "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee");
    CHECK(g["compute_capability"] == "12.0");
    CHECK(g["total_bytes"] == 102641664000);
    CHECK(g["free_bytes"] == 101000000000);
    CHECK(g["idle_used_bytes"] == 102641664000 - 101000000000);
    CHECK(j["total_vram"]["status"] == "measured");
    CHECK(j["total_vram"]["value"] == 150754820096 + 102641664000);
}

TEST_CASE("A host without the NVIDIA driver says so plainly and lists no GPU", "[gpu][inventory]") {
    const auto r = read_inventory("/nonexistent/libnvidia-ml.so.1");
    CHECK_FALSE(r.ok);
    CHECK(r.gpus.empty());
    CHECK(anvil::host::measured_inventory(r).gpus.empty());
    CHECK_THAT(r.error, Catch::StartsWith("no NVIDIA driver: /nonexistent/libnvidia-ml.so.1 cannot be loaded ("));
    CHECK_THAT(r.error, Catch::EndsWith("install the NVIDIA driver, or declare the GPUs in configuration"));
    CHECK(r.error.find('\n') == std::string::npos);
    CHECK(anvil::host::measured_inventory(r).source == r.error);  // what the daemon's status shows
    const auto j = anvil::host::inventory_to_json(r);
    CHECK(j["available"] == false);
    CHECK(j["error"] == r.error);
    CHECK(j["gpus"].empty());
    CHECK(anvil::host::inventory_table(r) == r.error + "\n");
}

TEST_CASE("NVML that cannot start, or a library that is not NVML, is a reading with the reason", "[gpu][inventory]") {
    {
        ScopedEnv failing("FAKE_NVML_INIT_ERROR", "1");
        const auto r = read_inventory(ANVIL_FAKE_NVML);
        CHECK_FALSE(r.ok);
        CHECK(r.error == "NVML cannot start: Driver Not Loaded (NVML error 9); is the NVIDIA kernel module loaded (nvidia-smi says more)?");
    }
    const auto not_nvml = read_inventory("libm.so.6");
    CHECK_FALSE(not_nvml.ok);
    CHECK(not_nvml.error == "libm.so.6 has no nvmlInit_v2: the NVIDIA driver is too old for anvil; update it");
}

TEST_CASE("A figure a GPU does not support is left empty with a note, the rest still measured", "[gpu][inventory]") {
    ScopedEnv no_cc("FAKE_NVML_NO_CC", "1");
    const auto r = read_inventory(ANVIL_FAKE_NVML);
    REQUIRE(r.ok);
    REQUIRE(r.gpus.size() == 2);
    CHECK(r.gpus[0].compute_capability.empty());
    CHECK(bytes(anvil::host::measured_inventory(r).gpus[0].total_bytes) == 150754820096);
    REQUIRE(r.notes.size() == 2);
    CHECK(r.notes[0] == "GPU-11111111-2222-3333-4444-555555555555: no compute capability: Not Supported (NVML error 3)");
    CHECK_THAT(anvil::host::inventory_table(r), Catch::Contains("note: GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee: no compute capability"));
}

TEST_CASE("anvil gpus prints a table, or JSON, of what NVML measures", "[gpu][cli]") {
    const std::string lib = std::string("ANVIL_NVML_LIBRARY=") + ANVIL_FAKE_NVML;
    const auto table = run({"env", lib, ANVIL_CLI, "gpus"});
    INFO(table.output);
    CHECK(table.exit_code == 0);
    CHECK_THAT(table.output, Catch::StartsWith("driver 580.95.05, CUDA 13.0, 2 GPUs (NVML ("));
    CHECK_THAT(table.output, Catch::Contains("#  UUID"));
    CHECK_THAT(table.output, Catch::Contains("0  GPU-11111111-2222-3333-4444-555555555555  NVIDIA H200"));
    CHECK_THAT(table.output, Catch::Contains("9.0   140.4 GiB  139.9 GiB  0.5 GiB    00000000:19:00.0"));
    CHECK_THAT(table.output, Catch::Contains("12.0  95.6 GiB   94.1 GiB   1.5 GiB    00000000:5A:00.0"));

    const auto json = run({"env", lib, ANVIL_CLI, "gpus", "--json"});
    CHECK(json.exit_code == 0);
    const auto j = nlohmann::json::parse(json.output);
    CHECK(j["gpus"].size() == 2);
    CHECK(j["cuda_driver_version"] == "13.0");
}

TEST_CASE("anvil gpus without a driver says so in one line and exits 2", "[gpu][cli]") {
    const auto plain = run({"env", "ANVIL_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1", ANVIL_CLI, "gpus"});
    CHECK(plain.exit_code == 2);
    CHECK_THAT(plain.output, Catch::StartsWith("anvil gpus: no NVIDIA driver: /nonexistent/libnvidia-ml.so.1 cannot be loaded"));
    CHECK(std::count(plain.output.begin(), plain.output.end(), '\n') == 1);
    const auto json = run({"env", "ANVIL_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1", ANVIL_CLI, "gpus", "--json"});
    CHECK(json.exit_code == 2);
    CHECK(nlohmann::json::parse(json.output)["available"] == false);

    // This host as it is: with a driver the real table, without one the plain reason.
    const auto here = read_inventory("libnvidia-ml.so.1");
    const auto real = run({"env", "-u", "ANVIL_NVML_LIBRARY", ANVIL_CLI, "gpus"});
    INFO(real.output);
    if (here.ok) {
        WARN("this host has an NVIDIA driver: checked `anvil gpus` against NVML, not the no-driver message");
        CHECK(real.exit_code == 0);
        for (const auto& g : here.gpus) CHECK_THAT(real.output, Catch::Contains(g.uuid));
    } else {
        CHECK(real.exit_code == 2);
        CHECK(real.output == "anvil gpus: " + here.error + "\n");
    }
}
