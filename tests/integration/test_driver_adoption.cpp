// No orphans: a supervisor killed with SIGKILL while its engines run is started again, and each
// engine is adopted (same process, not a second copy) or, if it died meanwhile, replaced.
#include <signal.h>

#include <catch2/catch.hpp>
#include <map>
#include <sstream>

#include "daemon/drivers/process_spawn.hpp"
#include "test_support.hpp"

using namespace anvil::drivers;
namespace fs = std::filesystem;

namespace {

struct AdoptionRun {
    std::map<std::string, pid_t> adopted, started;  // recipe id → keeper pid
    bool ready = false;
};

// Reads the supervisor's report up to "ready" (or its end), leaving it running.
AdoptionRun read_report(anvil::test::ChildProcess& sup) {
    AdoptionRun r;
    std::string line;
    while (sup.read_line(line, 60000)) {
        std::istringstream in(line);
        std::string verb, recipe;
        pid_t pid = -1;
        in >> verb >> recipe >> pid;
        if (verb == "adopted") r.adopted[recipe] = pid;
        if (verb == "started") r.started[recipe] = pid;
        if (verb == "ready") {
            r.ready = true;
            break;
        }
    }
    return r;
}

}  // namespace

TEST_CASE("engines outlive a supervisor killed with SIGKILL and are adopted, never duplicated", "[driver]") {
    anvil::test::TempDir dir;
    REQUIRE(anvil::test::run({ANVIL_ENGINE, "make-model", "--out", (dir / "models/tiny").string(), "--preset", "tiny"}).exit_code == 0);
    const std::vector<std::string> argv = {ANVIL_DRIVER_SUPERVISOR, "--state", (dir / "state").string(), "--engine", ANVIL_ENGINE,
                                           "--model", (dir / "models/tiny").string(), "--count", "2", "--port-first", "23700"};
    std::map<std::string, pid_t> first;
    {
        anvil::test::ChildProcess sup(argv);
        const AdoptionRun r = read_report(sup);
        REQUIRE(r.ready);
        CHECK(r.adopted.empty());
        REQUIRE(r.started.size() == 2);
        first = r.started;
        sup.kill(SIGKILL);
        sup.wait();
    }
    for (const auto& [recipe, pid] : first) CHECK(read_proc_stat(pid));

    {
        anvil::test::ChildProcess sup(argv);
        const AdoptionRun r = read_report(sup);
        REQUIRE(r.ready);
        CHECK(r.started.empty());
        CHECK(r.adopted == first);
        // One engine dies while no supervisor watches.
        ::kill(-first.at("sup-1"), SIGKILL);
        sup.kill(SIGKILL);
        sup.wait();
    }

    {
        anvil::test::ChildProcess sup(argv);
        const AdoptionRun r = read_report(sup);
        REQUIRE(r.ready);
        CHECK(r.adopted == std::map<std::string, pid_t>{{"sup-0", first.at("sup-0")}});
        REQUIRE(r.started.count("sup-1"));
        CHECK(r.started.at("sup-1") != first.at("sup-1"));
        first["sup-1"] = r.started.at("sup-1");
        sup.kill(SIGKILL);
        sup.wait();
    }

    std::vector<std::string> stop_argv = argv;
    stop_argv.push_back("--stop-all");
    const auto stopped = anvil::test::run(stop_argv);
    CHECK(stopped.exit_code == 0);
    CHECK(stopped.output.find("stopped 2") != std::string::npos);
    for (const auto& [recipe, pid] : first) {
        const auto s = read_proc_stat(pid);
        CHECK((!s || s->state == 'Z'));
    }
}
