// The collective probe's parent side (kernels/hardware/collective_probe, `anvil probe collectives`):
// a child bounded by a deadline that kills its whole process group, NCCL's log read for transports
// and diagnostics, a result believed only when every size was verified, and a receipt either way.
// A stand-in probe (tests/tools/gpu_fake_probe.cpp) passes, lies or hangs; the real probe runs where
// it is built, and its device test runs only where a GPU is.
#include <signal.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "kernels/hardware/collective_probe.hpp"
#include "daemon/host/host_inventory.hpp"
#include "support/child.hpp"
#include "kernels/hardware/nvml_inventory.hpp"
#include "test_support.hpp"

using anvil::test::run;
using anvil::test::TempDir;

namespace {

constexpr const char* kH200 = "GPU-11111111-2222-3333-4444-555555555555";
constexpr const char* kPro = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

// `anvil probe collectives …` with the stand-in NVML (two GPUs) and the given probe and mode.
anvil::test::ProcessResult probe_cli(const std::string& probe, const std::string& mode, std::vector<std::string> args) {
    std::vector<std::string> argv{"env", std::string("ANVIL_NVML_LIBRARY=") + ANVIL_FAKE_NVML, "ANVIL_COLLECTIVE_PROBE=" + probe,
                                  "FAKE_PROBE_MODE=" + mode, "NCCL_DEBUG=WARN", ANVIL_CLI, "probe", "collectives"};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv);
}

std::string receipt_path(const std::string& output) {
    const auto at = output.find("receipt ");
    if (at == std::string::npos) return {};
    const auto end = output.find(' ', at + 8);
    return output.substr(at + 8, end - at - 8);
}

bool gone_within_2s(pid_t pid) {
    for (int i = 0; i < 100; ++i) {
        if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
}

}  // namespace

TEST_CASE("NCCL's channel lines name the transports, each once", "[gpu][probe]") {
    const std::string log =
        "h:1:2 [0] NCCL INFO NCCL_DEBUG set by environment to INFO\n"
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
        "h:1:2 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read\n"
        "h:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via SHM/direct/direct\r\n"
        "h:1:2 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1\n"
        "h:1:2 [0] NCCL INFO Channel 02/0 : 0[1b000] -> 1[1c000] [send] via NET/IB/0\n";
    CHECK(anvil::hardware::nccl_transports(log) == std::vector<std::string>{"P2P/CUMEM/read", "SHM/direct/direct", "NET/IB/0"});
    CHECK(anvil::hardware::nccl_transports("no NCCL here\n").empty());
}

TEST_CASE("Diagnostics keep NCCL's warnings and the end of its log", "[gpu][probe]") {
    std::string log = "h:1:2 [0] NCCL WARN NET/Socket : no interface found\n";
    for (int i = 0; i < 30; ++i) log += "line " + std::to_string(i) + "\n";
    const auto d = anvil::hardware::nccl_diagnostics(log, 5);
    REQUIRE(d.size() == 6);
    CHECK(d[0] == "h:1:2 [0] NCCL WARN NET/Socket : no interface found");
    CHECK(d[1] == "line 25");
    CHECK(d[5] == "line 29");
}

TEST_CASE("A child past its deadline is killed with its whole process group", "[gpu][probe]") {
    auto env = anvil::support::current_environment();
    env["FAKE_PROBE_MODE"] = "hang";
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = anvil::support::run_child({ANVIL_FAKE_PROBE, "--gpus", "a,b"}, env, std::chrono::milliseconds(800));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(r.timed_out);
    CHECK(r.exit_code == 128 + SIGKILL);
    CHECK(seconds >= 0.8);
    CHECK(seconds < 3.5);
    CHECK_THAT(r.err, Catch::Contains("NCCL WARN Cuda failure"));
    const pid_t grandchild = static_cast<pid_t>(std::stol(r.out));
    CHECK(gone_within_2s(grandchild));  // not left behind holding a GPU

    const auto fine = anvil::support::run_child({"/bin/echo", "done"}, env, std::chrono::seconds(5));
    CHECK_FALSE(fine.timed_out);
    CHECK(fine.exit_code == 0);
    CHECK(fine.out == "done\n");
    const auto missing = anvil::support::run_child({"/nonexistent/probe"}, env, std::chrono::seconds(5));
    CHECK(missing.exec_failed);
    CHECK(missing.err == "cannot execute /nonexistent/probe: No such file or directory");
}

TEST_CASE("A probe that hangs is killed at the deadline and recorded as a failure with NCCL's diagnostics", "[gpu][probe][cli]") {
    TempDir tmp;
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = probe_cli(ANVIL_FAKE_PROBE, "hang",
                             {"--gpus", std::string(kH200) + "," + kPro, "--deadline", "1", "--receipts", (tmp / "receipts").string()});
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(seconds < 5);
    CHECK_THAT(r.output, Catch::Contains("anvil probe collectives: the collective probe did not finish within its 1.0 s deadline "
                                         "and was killed during all-reduce of 64 MiB; NCCL's diagnostics follow"));
    CHECK_THAT(r.output, Catch::Contains("  | host:1:1 [1] NCCL WARN Cuda failure 'peer access is not supported"));
    // NCCL_DEBUG is the child's only: INFO there, whatever this environment says (WARN).
    CHECK_THAT(r.output, Catch::Contains("NCCL_DEBUG seen by the probe: INFO"));

    const std::string path = receipt_path(r.output);
    REQUIRE_FALSE(path.empty());
    const auto receipt = nlohmann::json::parse(anvil::test::read_file(path));
    CHECK(receipt["kind"] == "anvil-collective-probe-receipt/v1");
    CHECK(receipt["outcome"] == "failed");
    CHECK(receipt["timed_out"] == true);
    CHECK(receipt["stage"] == "all-reduce of 64 MiB");
    CHECK(receipt["gpus"] == nlohmann::json::array({kH200, kPro}));
    CHECK(receipt["child_environment"]["NCCL_DEBUG"] == "INFO");
    CHECK(receipt["child_environment"]["CUDA_VISIBLE_DEVICES"] == std::string(kH200) + "," + kPro);
    CHECK(receipt["inventory"]["driver_version"] == "580.95.05");
    const auto sum = run({"sha256sum", path});
    CHECK_THAT(r.output, Catch::Contains(sum.output.substr(0, 64)));
}

TEST_CASE("A passing probe is proven with bandwidth, versions, transport and the rank map", "[gpu][probe][cli]") {
    TempDir tmp;
    const auto r = probe_cli(ANVIL_FAKE_PROBE, "pass", {"--gpus", std::string(kPro) + "," + kH200, "--max-bytes", "8192", "--receipts",
                                                        (tmp / "receipts").string()});
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("collectives proven over 2 GPUs in "));
    CHECK_THAT(r.output, Catch::Contains("NCCL 2.28.9, CUDA runtime 13.0, driver CUDA 13.0, transport P2P/CUMEM/read\n"));
    CHECK_THAT(r.output, Catch::Contains(std::string("  rank 0 → ") + kPro));
    CHECK_THAT(r.output, Catch::Contains(std::string("  rank 1 → ") + kH200));
    CHECK_THAT(r.output, Catch::Contains("  8192         "));

    const auto j = probe_cli(ANVIL_FAKE_PROBE, "pass", {"--gpus", kH200, "--max-bytes", "2048", "--json", "--receipts", (tmp / "receipts").string()});
    INFO(j.output);
    CHECK(j.exit_code == 0);
    const auto out = nlohmann::json::parse(j.output);
    CHECK(out["ok"] == true);
    CHECK(out["outcome"] == "proven");
    CHECK(out["results"].size() == 2);  // 1 KiB and 2 KiB
    CHECK(out["ranks"][0]["uuid"] == kH200);
    CHECK(out["receipt"]["sha256"].get<std::string>().size() == 64);
    CHECK(nlohmann::json::parse(anvil::test::read_file(out["receipt"]["path"].get<std::string>()))["outcome"] == "proven");
}

TEST_CASE("A probe that claims success over a wrong sum is not believed", "[gpu][probe][cli]") {
    TempDir tmp;
    const auto r = probe_cli(ANVIL_FAKE_PROBE, "wrong", {"--max-bytes", "4096", "--receipts", (tmp / "r").string()});
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::Contains("anvil probe collectives: collective probe failed: all-reduce of 4096 bytes gave wrong sums"));
}

TEST_CASE("The probe asks for GPUs this host has, and says plainly when it has none", "[gpu][probe][cli]") {
    TempDir tmp;
    const auto unknown = probe_cli(ANVIL_FAKE_PROBE, "pass", {"--gpus", "GPU-nope", "--receipts", (tmp / "r").string()});
    CHECK(unknown.exit_code == 2);
    CHECK_THAT(unknown.output, Catch::StartsWith("anvil probe: --gpus: GPU-nope is not a GPU of this host (`anvil gpus` lists them: "));
    const auto twice = probe_cli(ANVIL_FAKE_PROBE, "pass", {"--gpus", std::string(kH200) + "," + kH200});
    CHECK(twice.exit_code == 2);
    CHECK_THAT(twice.output, Catch::Contains("is listed twice"));

    const auto no_driver = run({"env", "ANVIL_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1", ANVIL_CLI, "probe", "collectives", "--gpus", kH200});
    CHECK(no_driver.exit_code == 2);
    CHECK_THAT(no_driver.output, Catch::StartsWith("anvil probe collectives: cannot probe collectives: no NVIDIA driver: "
                                                    "/nonexistent/libnvidia-ml.so.1 cannot be loaded"));
    CHECK(std::count(no_driver.output.begin(), no_driver.output.end(), '\n') == 1);
}

#ifdef ANVIL_COLLECTIVE_PROBE
TEST_CASE("The real probe, given GPUs CUDA cannot see, fails cleanly with a receipt", "[gpu][probe][cli]") {
    TempDir tmp;
    const auto r = probe_cli(ANVIL_COLLECTIVE_PROBE, "", {"--gpus", std::string(kH200) + "," + kPro, "--deadline", "20", "--receipts",
                                                           (tmp / "r").string()});
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::StartsWith("anvil probe collectives: collective probe failed: "));
    if (!anvil::hardware::read_inventory("libnvidia-ml.so.1").ok)
        CHECK_THAT(r.output, Catch::Contains("collective probe failed: no NVIDIA driver: CUDA finds no driver library (libcuda)"));
    else
        CHECK_THAT(r.output, Catch::Contains(std::string(kH200) + " is not among the "));
    const auto receipt = nlohmann::json::parse(anvil::test::read_file(receipt_path(r.output)));
    CHECK(receipt["outcome"] == "failed");
    CHECK(receipt["cuda_runtime_version"].is_string());
    CHECK(receipt["nccl_version"].get<std::string>().starts_with("2."));
}

TEST_CASE("On a GPU host the probe proves the collective path within 10 s", "[gpu][probe][device]") {
    const auto here = anvil::hardware::read_inventory("libnvidia-ml.so.1");
    if (!here.ok || here.gpus.empty()) {
        WARN("skipped: needs an NVIDIA GPU and driver (" << (here.ok ? "NVML lists no GPU" : here.error) << ")");
        return;
    }
    TempDir tmp;
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = run({"env", "-u", "ANVIL_NVML_LIBRARY", "ANVIL_COLLECTIVE_PROBE=" + std::string(ANVIL_COLLECTIVE_PROBE), ANVIL_CLI, "probe",
                        "collectives", "--deadline", "60", "--json", "--receipts", (tmp / "r").string()});
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto out = nlohmann::json::parse(r.output);
    CHECK(out["outcome"] == "proven");
    CHECK(out["ranks"].size() == here.gpus.size());
    CHECK(out["results"].size() == 19);  // 1 KiB … 256 MiB
    CHECK(out["results"].back()["bytes"] == 256ll << 20);
    CHECK(seconds < 10);
}
#endif

TEST_CASE("The newest receipt decides the inventory's collective path, for exactly the GPUs it probed", "[gpu][probe][inventory]") {
    TempDir tmp;
    const auto receipts = tmp / "receipts";
    const auto reading = anvil::hardware::read_inventory(ANVIL_FAKE_NVML);
    REQUIRE(reading.ok);
    CHECK_FALSE(anvil::hardware::latest_probe_receipt(receipts));
    auto probe = [&](const char* mode, std::vector<std::string> gpus) {
        ::setenv("FAKE_PROBE_MODE", mode, 1);
        anvil::hardware::ProbeRequest request;
        request.probe = ANVIL_FAKE_PROBE;
        request.gpus = std::move(gpus);
        request.max_bytes = 4096;
        request.deadline = std::chrono::milliseconds(700);
        const auto outcome = anvil::hardware::run_collective_probe(request);
        ::unsetenv("FAKE_PROBE_MODE");
        std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // receipt names are per second
        return anvil::hardware::write_probe_receipt(receipts, anvil::hardware::probe_receipt(request, outcome, nullptr));
    };
    auto judged = [&] {
        auto inventory = anvil::host::measured_inventory(reading);
        const auto latest = anvil::hardware::latest_probe_receipt(receipts);
        REQUIRE(latest);
        anvil::host::apply_probe_receipt(inventory, *latest);
        return inventory;
    };

    const auto both = probe("pass", {kPro, kH200});
    auto inv = judged();
    CHECK(inv.collectives == anvil::registry::CollectivePath::proven);
    CHECK_THAT(inv.collectives_notes, Catch::StartsWith("NCCL 2.28.9 all-reduce over 2 GPUs via P2P/CUMEM/read, bus bandwidth 0.4 GB/s at 0 MiB ("));
    CHECK_THAT(inv.collectives_notes, Catch::Contains("sha256 " + both.sha256.substr(0, 12)));

    probe("pass", {kH200});
    inv = judged();
    CHECK(inv.collectives == anvil::registry::CollectivePath::unknown);
    CHECK_THAT(inv.collectives_notes, Catch::StartsWith("the last collective probe proved 1 of 2 GPUs: probe them all"));

    probe("hang", {kH200, kPro});
    inv = judged();
    CHECK(inv.collectives == anvil::registry::CollectivePath::failed);
    CHECK_THAT(inv.collectives_notes, Catch::StartsWith("collective probe failed: the collective probe did not finish within its 0.7 s deadline"));

    probe("pass", {kH200, "GPU-gone"});
    inv = judged();
    CHECK(inv.collectives == anvil::registry::CollectivePath::unknown);
    CHECK_THAT(inv.collectives_notes, Catch::StartsWith("the last collective probe ran over GPUs not on this host"));
}
