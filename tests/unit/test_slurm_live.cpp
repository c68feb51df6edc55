// Against a real Slurm (tests/slurm/run.sh starts one from Debian's packages and runs these, which
// are hidden from a plain run): slurmrestd answers the client, bad tokens and addresses fail in one
// line that says what to do, and anvild with a Slurm placement judges by the cluster's node and
// shows it in GET /api/v1/inventory and `anvil gpus --cluster`.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "daemon_fixture.hpp"
#include "engine/supervisor/slurm_rest.hpp"
#include "test_support.hpp"

using namespace anvil::driver;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

std::string env(const char* name) {
    const char* v = std::getenv(name);
    if (!v || !*v) FAIL(std::string(name) + " is not set: run these through tests/slurm/run.sh, which starts the cluster");
    return v;
}

SlurmRestConfig live() {
    SlurmRestConfig c;
    c.address = env("ANVIL_SLURM_REST");
    c.user = env("ANVIL_SLURM_USER");
    c.token_file = env("ANVIL_SLURM_TOKEN_FILE");
    return c;
}

}  // namespace

TEST_CASE("slurmrestd: the cluster's node and its GPUs; a bad token or address is one actionable line", "[.][slurm-live]") {
    const SlurmRest rest(live());
    CHECK(rest.ping()["pings"].is_array());
    const anvil::registry::SlurmCluster cluster = rest.nodes();
    REQUIRE(cluster.nodes.size() == 1);
    CHECK(cluster.nodes[0].name == env("ANVIL_SLURM_NODE"));
    CHECK(cluster.nodes[0].gpu_count() == std::stoi(env("ANVIL_SLURM_GPUS")));
    CHECK(cluster.nodes[0].usable());
    CHECK_THAT(cluster.source, Catch::Contains("Slurm 22.05"));

    anvil::test::TempDir dir;
    SlurmRestConfig bad = live();
    bad.token_file = dir / "token";
    anvil::test::write_file(bad.token_file, "eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl\n");
    try {
        SlurmRest(bad).nodes();
        FAIL("a forged token was accepted");
    } catch (const SlurmError& e) {
        CHECK_THAT(e.what(), Catch::Contains("GET /slurm/v0.0.38/nodes") && Catch::Contains("scontrol token"));
    }
    bad.token_file = dir / "missing";
    CHECK_THROWS_WITH(SlurmRest(bad).nodes(), Catch::Contains("cannot read the token file") && Catch::Contains("placement.token_file"));
    bad = live();
    bad.address = "http://127.0.0.1:1";
    CHECK_THROWS_WITH(SlurmRest(bad).ping(), Catch::Contains("is slurmrestd running there (placement.rest)"));
}

#ifdef ANVILD
TEST_CASE("anvild with a Slurm placement judges by the cluster's node and shows the cluster", "[.][slurm-live]") {
    using namespace anvil::test::daemon;
    Daemon d;
    json config = json::parse(anvil::test::read_file(d.dir / "anvild.json"));
    config["placement"] = {{"kind", "slurm"},
                           {"rest", env("ANVIL_SLURM_REST")},
                           {"user", env("ANVIL_SLURM_USER")},
                           {"token_file", env("ANVIL_SLURM_TOKEN_FILE")},
                           {"partition", "gpu"},
                           {"gpu_memory_mib", {{"*", 81559}}}};
    anvil::test::write_file(d.dir / "anvild.json", config.dump(2));
    json eight = json::parse(unpinned_container_recipe("eight-gpus"));
    eight["hardware_id"] = "h100-80gb";
    eight["hardware_count"] = 8;
    d.repo.write("recipes/eight-gpus.json", eight.dump(2));
    d.repo.commit("a recipe no node can hold");
    d.start();

    auto [code, inventory] = d.get("/api/v1/inventory");
    REQUIRE(code == 200);
    const json& cluster = inventory["data"]["cluster"];
    CHECK(cluster["placement"]["kind"] == "slurm");
    REQUIRE(cluster["nodes"].size() == 1);
    CHECK(cluster["nodes"][0]["gpu_count"] == std::stoi(env("ANVIL_SLURM_GPUS")));
    const json& judging = inventory["data"]["judging_with"];
    CHECK_THAT(judging["source"].get<std::string>(), Catch::Contains("the largest Slurm node (" + env("ANVIL_SLURM_NODE")));
    REQUIRE(judging["inventory"]["gpus"].size() == std::size_t(std::stoi(env("ANVIL_SLURM_GPUS"))));
    CHECK(judging["inventory"]["gpus"][0]["total_bytes"]["value"] == 81559LL * 1024 * 1024);

    // A recipe needing more GPUs than any node has is infeasible, and says which node it was judged by.
    REQUIRE(eventually([&] { return d.status_of("eight-gpus") == "rejected"; }, 60s));
    const std::string feasibility = d.get("/api/v1/recipes/eight-gpus/feasibility").second.dump();
    CHECK_THAT(feasibility, Catch::Contains("needs 8 GPUs, the largest Slurm node (" + env("ANVIL_SLURM_NODE") + ", of 1 usable in partition gpu) has " +
                                            env("ANVIL_SLURM_GPUS")));

    const auto shown = d.cli({"gpus", "--cluster"});
    INFO(shown.output);
    CHECK(shown.exit_code == 0);
    CHECK_THAT(shown.output, Catch::Contains("placement   slurm") && Catch::Contains(env("ANVIL_SLURM_NODE")) &&
                                 Catch::Contains(env("ANVIL_SLURM_GPUS") + "/" + env("ANVIL_SLURM_GPUS")));
    CHECK(d.cli({"gpus", "--cluster", "--json"}).exit_code == 0);
}
#endif
