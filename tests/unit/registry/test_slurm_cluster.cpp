// A Slurm cluster on paper: GRES strings as Slurm prints them, slurmrestd's node list (a real answer
// of Slurm 22.05.8 and variations of it), and the node recipes are judged against.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "daemon/config/config.hpp"
#include "registry/recipe_gates.hpp"
#include "registry/slurm_cluster.hpp"

using namespace anvil::registry;
using nlohmann::json;

namespace {

json real_answer() {
    std::ifstream in(std::string(ANVIL_EXAMPLES_DIR) + "/../tests/data/slurm/nodes-22.05.8.json");
    std::stringstream s;
    s << in.rdbuf();
    return json::parse(s.str());
}

// A node shaped as slurmrestd lists it.
json node(const std::string& name, const std::string& gres, const std::string& used, int cpus, const std::string& state = "idle",
          json flags = json::array(), json partitions = json::array({"gpu"})) {
    return {{"name", name},       {"address", name + ".cluster"}, {"state", state},   {"state_flags", flags},
            {"partitions", partitions}, {"cpus", cpus},           {"idle_cpus", cpus}, {"real_memory", 512000},
            {"alloc_memory", 0},  {"gres", gres},                 {"gres_used", used}};
}

SlurmCluster cluster_of(json nodes) {
    FieldErrors errors;
    auto c = parse_slurm_nodes(json{{"errors", json::array()}, {"nodes", nodes}}, "test", "2026-12-03T00:00:00Z", errors);
    INFO((errors.empty() ? "" : errors[0].describe()));
    REQUIRE(c);
    return *c;
}

}  // namespace

TEST_CASE("GRES lists are read as Slurm prints them", "[slurm]") {
    std::string error;
    auto g = parse_gres("gpu:4", error);
    REQUIRE(g);
    REQUIRE(g->size() == 1);
    CHECK((*g)[0].name == "gpu");
    CHECK((*g)[0].type.empty());
    CHECK((*g)[0].count == 4);

    g = parse_gres("gpu:a100:2(S:0-1),gpu:v100:1(S:0),mps:100K", error);
    REQUIRE(g);
    REQUIRE(g->size() == 3);
    CHECK((*g)[0].type == "a100");
    CHECK((*g)[0].count == 2);
    CHECK((*g)[1].type == "v100");
    CHECK((*g)[2].name == "mps");
    CHECK((*g)[2].count == 100 * 1024);

    g = parse_gres("gpu:(null):0(IDX:N/A)", error);  // gres_used of an idle untyped node
    REQUIRE(g);
    CHECK((*g)[0].type.empty());
    CHECK((*g)[0].count == 0);
    g = parse_gres("gpu:h100:3(IDX:0-1,3)", error);  // a comma inside the index list
    REQUIRE(g);
    REQUIRE(g->size() == 1);
    CHECK((*g)[0].count == 3);
    g = parse_gres("gpu:h100", error);  // a type without a count is one
    REQUIRE(g);
    CHECK((*g)[0].type == "h100");
    CHECK((*g)[0].count == 1);
    for (const char* empty : {"", "(null)", "N/A"}) {
        g = parse_gres(empty, error);
        REQUIRE(g);
        CHECK(g->empty());
    }

    for (const char* bad : {"gpu:a:b:c", "gpu:h100:x", ":4", "gpu:4,", "gpu:4(S:0"}) {
        INFO(bad);
        error.clear();
        CHECK_FALSE(parse_gres(bad, error));
        CHECK_FALSE(error.empty());
    }
}

TEST_CASE("slurmrestd's node list of a real Slurm 22.05.8 is read", "[slurm]") {
    FieldErrors errors;
    auto c = parse_slurm_nodes(real_answer(), "slurmrestd test", "2026-12-03T00:00:00Z", errors);
    REQUIRE(c);
    REQUIRE(c->nodes.size() == 1);
    const SlurmNode& n = c->nodes[0];
    CHECK(n.state == "idle");
    CHECK(n.usable());
    CHECK(n.cpus == 2);
    CHECK(n.partitions == std::vector<std::string>{"gpu"});
    CHECK(n.gpu_count() == 4);
    CHECK(n.free_gpus() == 4);
    CHECK(n.real_memory_mib > 0);
    const json j = c->to_json();
    CHECK(j["nodes"][0]["gpu_count"] == 4);
    CHECK(j["nodes"][0]["usable"] == true);
}

TEST_CASE("a node list anvil cannot read names the field, and slurmrestd's own errors are reported", "[slurm]") {
    FieldErrors errors;
    json answer = real_answer();
    answer["nodes"][0]["gres"] = "gpu:a:b:c";
    answer["nodes"][0].erase("cpus");
    CHECK_FALSE(parse_slurm_nodes(answer, "t", "", errors));
    REQUIRE(errors.size() == 2);
    CHECK(errors[0].pointer == "/nodes/0/cpus");
    CHECK(errors[1].pointer == "/nodes/0/gres");
    CHECK_THAT(errors[1].found, Catch::Contains("gpu:a:b:c"));

    errors.clear();
    CHECK_FALSE(parse_slurm_nodes(json{{"errors", {{{"error", "Invalid user"}, {"error_code", 1}}}}}, "t", "", errors));
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].found == "Invalid user");
}

TEST_CASE("GPUs in use are counted against their type, untyped use against the node's types in order", "[slurm]") {
    const SlurmCluster c = cluster_of(json::array({node("a", "gpu:h100:4,gpu:l4:2", "gpu:h100:3(IDX:0-2),gpu:l4:0", 32),
                                                   node("b", "gpu:h100:4", "gpu:2", 32)}));
    CHECK(c.nodes[0].gpu_count() == 6);
    CHECK(c.nodes[0].free_gpus() == 3);
    CHECK(c.nodes[1].free_gpus() == 2);
}

TEST_CASE("recipes are judged against the largest usable node of the partition", "[slurm]") {
    const SlurmCluster c = cluster_of(json::array({
        node("small", "gpu:l4:2", "gpu:l4:0", 16),
        node("big-but-drained", "gpu:h100:8", "gpu:h100:0", 64, "idle", json::array({"DRAIN"})),
        node("big-down", "gpu:h100:8", "gpu:h100:0", 64, "down"),
        node("elsewhere", "gpu:h100:8", "gpu:h100:0", 64, "idle", json::array(), json::array({"other"})),
        node("mid", "gpu:a100:4", "gpu:a100:4", 32, "allocated"),  // busy now, but a job may wait for it
    }));
    std::string why;
    auto inv = best_node_inventory(c, "gpu", {{"a100", 40960}}, why);
    REQUIRE(inv);
    REQUIRE(inv->gpus.size() == 4);
    CHECK_THAT(inv->scope, Catch::Contains("mid") && Catch::Contains("of 2 usable in partition gpu"));
    CHECK(inv->gpus[0].total_bytes.status == EvidenceStatus::confirmed);
    CHECK(std::get<std::int64_t>(*inv->gpus[0].total_bytes.value) == 40960LL * 1024 * 1024);
    CHECK(inv->evidence() == EvidenceStatus::assumed);  // the idle use is assumed nil

    // Without a partition every usable node counts; a GPU type with no memory configured is unknown.
    inv = best_node_inventory(c, "", {}, why);
    REQUIRE(inv);
    CHECK(inv->gpus.size() == 8);
    CHECK_THAT(inv->source, Catch::Contains("elsewhere"));
    CHECK(inv->gpus[0].total_bytes.status == EvidenceStatus::unknown);
    CHECK_THAT(inv->gpus[0].total_bytes.notes, Catch::Contains("placement.gpu_memory_mib.h100"));
    // "*" covers the types not named.
    inv = best_node_inventory(c, "", {{"*", 81920}}, why);
    REQUIRE(inv);
    CHECK(inv->gpus[0].total_bytes.status == EvidenceStatus::confirmed);

    CHECK_FALSE(best_node_inventory(c, "nowhere", {}, why));
    CHECK_THAT(why, Catch::Contains("no usable node in partition nowhere"));
}

TEST_CASE("jobs ask for GPUs of the type of the node the gates judged by, untyped where the cluster names none", "[slurm]") {
    const SlurmCluster c = cluster_of(json::array({
        node("small", "gpu:l4:2", "gpu:l4:0", 16),
        node("mid", "gpu:a100:4", "gpu:a100:0", 32),
    }));
    // A 1-GPU recipe judged by mid's a100 memory must not land on small's l4.
    const SlurmNode* judged = best_node(c, "gpu", {});
    REQUIRE(judged);
    CHECK(judged->name == "mid");
    CHECK(gpu_gres_request(judged, 1) == "gpu:a100:1");
    CHECK(gpu_gres_request(judged, 4) == "gpu:a100:4");

    const SlurmCluster untyped = cluster_of(json::array({node("n", "gpu:4", "gpu:0", 16)}));
    CHECK(gpu_gres_request(best_node(untyped, "gpu", {}), 2) == "gpu:2");
    // A node of two kinds: the gates judged by both, so neither is asked for.
    const SlurmCluster mixed = cluster_of(json::array({node("m", "gpu:h100:4,gpu:l4:2", "gpu:h100:0,gpu:l4:0", 32)}));
    CHECK(gpu_gres_request(best_node(mixed, "gpu", {}), 2) == "gpu:2");
    CHECK(gpu_gres_request(nullptr, 1) == "gpu:1");
    CHECK(best_node(c, "nowhere", {}) == nullptr);
}

TEST_CASE("a recipe needing more GPUs than any node has is infeasible, and the reason says so", "[slurm]") {
    const SlurmCluster c = cluster_of(json::array({node("n1", "gpu:a100:4", "gpu:a100:0", 32), node("n2", "gpu:a100:4", "gpu:a100:0", 32)}));
    std::string why;
    const auto inv = best_node_inventory(c, "gpu", {{"a100", 40960}}, why);
    REQUIRE(inv);
    Recipe recipe;
    recipe.id = "eight";
    recipe.hardware_id = "a100-40gb";
    recipe.hardware_count = 8;
    GateContext ctx;
    ctx.inventory = &*inv;
    const auto assessment = assess_recipe(recipe, PinStatus{}, {}, ctx);
    const auto gate = std::find_if(assessment.gates.begin(), assessment.gates.end(), [](const Gate& g) { return g.name == GateName::gpu_count; });
    REQUIRE(gate != assessment.gates.end());
    CHECK(gate->status == AxisStatus::fail);
    CHECK_THAT(gate->reason, Catch::Contains("needs 8 GPUs, the largest Slurm node (n1, of 2 usable in partition gpu) has 4"));
}

TEST_CASE("placement: local, or a Slurm cluster with every key checked", "[slurm][config]") {
    using anvil::daemon::parse_config;
    CHECK_FALSE(parse_config(R"({"placement": "local"})", "/etc/anvil/anvild.json").slurm);
    CHECK_FALSE(parse_config(R"({"placement": {"kind": "local"}})", "/etc/anvil/anvild.json").slurm);
    const auto c = parse_config(R"({"placement": {"kind": "slurm", "rest": "http://ctl:6820/", "user": "anvil",
        "token_file": "slurm.jwt", "partition": "gpu", "account": "ml", "time_limit_minutes": 720,
        "gpu_memory_mib": {"h100": 81559, "*": 40960}, "timeout_seconds": 5, "environment": {"HOME": "/scratch/anvil"}}})",
                                "/etc/anvil/anvild.json");
    REQUIRE(c.slurm);
    CHECK(c.slurm->rest.address == "http://ctl:6820");
    CHECK(c.slurm->rest.user == "anvil");
    CHECK(c.slurm->rest.token_file == "/etc/anvil/slurm.jwt");
    CHECK(c.slurm->partition == "gpu");
    CHECK(c.slurm->account == "ml");
    CHECK(c.slurm->time_limit == std::chrono::minutes(720));
    CHECK(c.slurm->gpu_memory_mib.at("h100") == 81559);
    CHECK(c.slurm->rest.timeout == std::chrono::seconds(5));
    CHECK(c.slurm->environment == std::map<std::string, std::string>{{"HOME", "/scratch/anvil"}});

    auto problems = [](const std::string& text) {
        try {
            parse_config(text, "/etc/anvil/anvild.json");
        } catch (const anvil::daemon::ConfigError& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    CHECK_THAT(problems(R"({"placement": "cluster"})"), Catch::Contains("/placement: expected \"local\" or a placement object"));
    CHECK_THAT(problems(R"({"placement": {"kind": "k8s"}})"), Catch::Contains("/placement/kind: expected \"local\" or \"slurm\""));
    const std::string all = problems(R"({"placement": {"kind": "slurm", "rest": "ctl:6820", "user": "root",
        "time_limit_minutes": -1, "gpu_memory_mib": {"h100": "80G"}, "nodes": 2,
        "environment": {"ANVIL_JOB_ARGV": "[]", "TMPDIR": 1}}})");
    CHECK_THAT(all, Catch::Contains("/placement/rest: expected slurmrestd's address"));
    CHECK_THAT(all, Catch::Contains("/placement/user: expected the user jobs run as: not root"));
    CHECK_THAT(all, Catch::Contains("/placement/token_file: expected a file holding the user's JWT"));
    CHECK_THAT(all, Catch::Contains("/placement/time_limit_minutes"));
    CHECK_THAT(all, Catch::Contains("/placement/gpu_memory_mib/h100: expected one GPU's memory in MiB"));
    CHECK_THAT(all, Catch::Contains("/placement/nodes"));
    CHECK_THAT(all, Catch::Contains("/placement/environment/ANVIL_JOB_ARGV: expected a variable name without '='"));
    CHECK_THAT(all, Catch::Contains("/placement/environment/TMPDIR: expected the variable's value as a string"));
    CHECK_THAT(problems(R"({"placement": {"kind": "slurm", "rest": "unix:/run/slurmrestd.sock", "user": "anvil", "token_file": "t"},
        "inventory": {"gpus": []}})"),
               Catch::Contains("/inventory: expected \"auto\" or nothing with a Slurm placement"));
}
