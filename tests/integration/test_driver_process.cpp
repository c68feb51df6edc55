// The process driver on real child processes: exact argv and environment, exit codes, stop with
// grace over the whole process group, capped logs, and readiness that fails fast or times out.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "daemon/drivers/command_runner.hpp"
#include "daemon/drivers/process_driver.hpp"
#include "daemon/drivers/process_spawn.hpp"
#include "daemon/drivers/readiness.hpp"
#include "test_support.hpp"

using namespace anvil::drivers;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

ResolvedLaunch command(std::vector<std::string> argv, std::map<std::string, std::string> env = {}) {
    ResolvedLaunch l;
    l.recipe_id = "cmd";
    l.kind = "native";
    l.arguments = std::move(argv);
    l.environment = std::move(env);
    l.host = "127.0.0.1";
    l.port = 0;
    return l;
}

Probe wait_exit(Driver& d, const EngineHandle& e, std::chrono::milliseconds limit = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    Probe p = d.probe(e);
    while (p.state == RunState::running && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(5ms);
        p = d.probe(e);
    }
    return p;
}

bool exited_or_reaped(pid_t pid) {
    const auto s = read_proc_stat(pid);
    return !s || s->state == 'Z' || s->state == 'X';
}

}  // namespace

TEST_CASE("the process driver runs the argv without a shell and passes the environment exactly", "[driver]") {
    anvil::test::TempDir dir;
    ProcessDriver d({.state_dir = dir / "state"});
    const auto env = d.start({"env", "r1"}, command({"/usr/bin/env"}, {{"A", "1"}, {"B", "x y $HOME"}}));
    CHECK(wait_exit(d, env).exit_code == 0);
    CHECK(anvil::test::read_file(env.log_path) == "A=1\nB=x y $HOME\n");

    const auto echo = d.start({"echo", "r1"}, command({"echo", "a  b", "$HOME", ";", "ls", "*"}, {{"PATH", "/usr/bin:/bin"}}));
    CHECK(wait_exit(d, echo).exit_code == 0);
    CHECK(d.logs(echo, 5) == "a  b $HOME ; ls *\n");
}

TEST_CASE("GPUs chosen by UUID reach a native engine as CUDA_VISIBLE_DEVICES, whatever the launch held", "[driver]") {
    anvil::test::TempDir dir;
    ProcessDriver d({.state_dir = dir / "state"});
    auto launch = command({"/usr/bin/env"});
    launch.gpu_uuids = {"GPU-5f2a0c1e-0000-0000-0000-000000000001", "GPU-5f2a0c1e-0000-0000-0000-000000000002"};
    const auto chosen = d.start({"gpus", "r1"}, launch);
    CHECK(wait_exit(d, chosen).exit_code == 0);
    CHECK(anvil::test::read_file(chosen.log_path) ==
          "CUDA_VISIBLE_DEVICES=GPU-5f2a0c1e-0000-0000-0000-000000000001,GPU-5f2a0c1e-0000-0000-0000-000000000002\n");

    // anvil places the engine: a value already in the launch (no recipe can set it) is replaced.
    launch.environment = {{"CUDA_VISIBLE_DEVICES", "3"}};
    const auto own = d.start({"gpus", "r2"}, launch);
    CHECK(wait_exit(d, own).exit_code == 0);
    CHECK(anvil::test::read_file(own.log_path) ==
          "CUDA_VISIBLE_DEVICES=GPU-5f2a0c1e-0000-0000-0000-000000000001,GPU-5f2a0c1e-0000-0000-0000-000000000002\n");
}

TEST_CASE("a helper command is killed with its process group at its deadline", "[driver]") {
    anvil::test::TempDir dir;
    const auto pid_file = dir / "background.pid";
    const auto started = std::chrono::steady_clock::now();
    const auto r = run_command({"/bin/sh", "-c", "sleep 30 & echo $! > " + pid_file.string() + "; exec sleep 30"},
                               std::nullopt, 300ms);
    CHECK(std::chrono::steady_clock::now() - started < 10s);
    CHECK(r.timed_out);
    CHECK(r.exit_code == 128 + SIGKILL);
    CHECK_THAT(r.err, Catch::EndsWith("/bin/sh did not finish within 300 ms and was killed"));
    // What it started in its group goes with it.
    const pid_t background = std::stoi(anvil::test::read_file(pid_file));
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!exited_or_reaped(background) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
    CHECK(exited_or_reaped(background));

    const auto quick = run_command({"/bin/echo", "in time"}, std::nullopt, 10s);
    CHECK(quick.ok());
    CHECK_FALSE(quick.timed_out);
    CHECK(quick.out == "in time\n");
}

TEST_CASE("an engine's exit code is reported, and a command that cannot run fails with why", "[driver]") {
    anvil::test::TempDir dir;
    ProcessDriver d({.state_dir = dir / "state"});
    const auto e = d.start({"exit", "r1"}, command({"/bin/sh", "-c", "exit 7"}));
    const Probe p = wait_exit(d, e);
    CHECK(p.state == RunState::exited);
    CHECK(p.exit_code == 7);
    CHECK(anvil::test::read_file(e.directory / "exit-code") == "7\n");

    CHECK_THROWS_WITH(d.start({"missing", "r1"}, command({dir.path().string() + "/no-such-engine"})),
                      Catch::Contains("cannot execute") && Catch::Contains("No such file"));
    CHECK_THROWS_WITH(d.start({"missing", "r1"}, command({"no-such-engine-anywhere"}, {{"PATH", "/usr/bin"}})),
                      Catch::Contains("not found on PATH (/usr/bin)"));
    anvil::test::write_file(dir / "not-executable", "#!/bin/sh\n");
    CHECK_THROWS_WITH(d.start({"noexec", "r1"}, command({(dir / "not-executable").string()})), Catch::Contains("Permission denied"));
}

TEST_CASE("stop sends SIGTERM to the process group and SIGKILL after the grace", "[driver]") {
    anvil::test::TempDir dir;
    ProcessDriver d({.state_dir = dir / "state"});

    const auto polite = d.start({"sleep", "r1"}, command({"/bin/sleep", "30"}));
    auto t0 = std::chrono::steady_clock::now();
    d.stop(polite, 5s);
    CHECK(std::chrono::steady_clock::now() - t0 < 2s);
    const Probe p = d.probe(polite);
    CHECK(p.state == RunState::exited);
    CHECK(p.exit_code == 128 + SIGTERM);
    CHECK_FALSE(fs::exists(polite.directory / "engine.json"));
    CHECK(fs::exists(polite.log_path));  // logs are kept

    // A shell that ignores SIGTERM, with a child that inherits that: only SIGKILL ends them.
    const auto stubborn = d.start({"stubborn", "r1"}, command({"/bin/sh", "-c", "trap '' TERM; /bin/sleep 30 & echo $!; wait"}));
    std::string child;
    for (int i = 0; i < 400 && child.empty(); ++i) {
        std::this_thread::sleep_for(5ms);
        child = d.logs(stubborn, 1);
    }
    REQUIRE_FALSE(child.empty());
    const pid_t child_pid = std::stoi(child);
    t0 = std::chrono::steady_clock::now();
    d.stop(stubborn, 300ms);
    const auto took = std::chrono::steady_clock::now() - t0;
    CHECK(took >= 300ms);
    CHECK(took < 5s);
    CHECK(exited_or_reaped(stubborn.pid));
    CHECK(exited_or_reaped(child_pid));
}

TEST_CASE("an engine's stdout and stderr go to a size-capped log", "[driver]") {
    anvil::test::TempDir dir;
    ProcessDriver d({.state_dir = dir / "state", .log_cap_bytes = 16 * 1024});
    const auto e = d.start({"chatty", "r1"}, command({"/bin/sh", "-c", "seq 1 100000; echo done >&2"}));
    CHECK(wait_exit(d, e).exit_code == 0);
    CHECK(fs::file_size(e.log_path) <= 16 * 1024);
    REQUIRE(fs::exists(e.log_path.string() + ".1"));
    CHECK(fs::file_size(e.log_path.string() + ".1") <= 16 * 1024);
    CHECK(d.logs(e, 2) == "100000\ndone\n");
}

TEST_CASE("readiness fails at once when the engine exits while starting, and at the deadline otherwise", "[driver]") {
    anvil::test::TempDir dir;
    ProcessDriver d({.state_dir = dir / "state"});
    auto crash = command({"/bin/sh", "-c", "echo loading; echo 'CUDA out of memory' >&2; exit 3"});
    crash.port = allocate_port("127.0.0.1", 23400, 23499);
    const auto e = d.start({"crash", "r1"}, crash);
    auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(wait_ready(d, e, 30s), Catch::Contains("exited with code 3") && Catch::Contains("CUDA out of memory"));
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);

    auto silent = command({"/bin/sleep", "30"});
    silent.port = allocate_port("127.0.0.1", 23400, 23499);
    const auto s = d.start({"silent", "r1"}, silent);
    t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(wait_ready(d, s, 300ms), Catch::Contains("not ready after 300 ms"));
    CHECK(std::chrono::steady_clock::now() - t0 < 3s);
    d.stop(s, 1s);
}
