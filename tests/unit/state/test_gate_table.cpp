// The one gate table (state/gate_table.hpp): which gates a plan runs, which the ledger's guard
// requires, and whether gate results pass the hard gates. Pure functions: no engine, no ledger.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "daemon/qualify/gates.hpp"
#include "daemon/qualify/qualification.hpp"
#include "state/gate_table.hpp"
#include "state/lifecycle.hpp"

using namespace anvil;
using state::GateClaims;
using state::GateSpec;
using state::GateWhen;

namespace {

std::vector<std::string> gates_run(const GateClaims& claims) {
    std::vector<std::string> out;
    for (const auto& g : state::gate_table())
        if (state::runs_for(g, claims)) out.emplace_back(g.name);
    return out;
}

const std::map<std::string, bool> kFourPass{{"identity", true}, {"smoke", true}, {"json", true}, {"determinism", true}};

std::map<std::string, bool> four_pass_and(std::map<std::string, bool> more) {
    more.insert(kFourPass.begin(), kFourPass.end());
    return more;
}

}  // namespace

TEST_CASE("a plan runs the always-gates in order, plus the gate of each claim it makes", "[qualify][gate-table]") {
    struct Row {
        GateClaims claims;
        std::vector<std::string> gates;
    };
    const std::vector<Row> rows{
        {{}, {"identity", "smoke", "json", "determinism"}},
        {{.tools = true}, {"identity", "smoke", "json", "determinism", "tools"}},
        {{.context = true}, {"identity", "smoke", "json", "determinism", "needle"}},
        {{.tools = true, .context = true}, {"identity", "smoke", "json", "determinism", "tools", "needle"}},
    };
    for (const auto& row : rows) {
        INFO("tools " << row.claims.tools << ", context " << row.claims.context);
        CHECK(gates_run(row.claims) == row.gates);
    }
}

TEST_CASE("every gate is hard today: the guard requires those every plan runs", "[qualify][gate-table][lifecycle]") {
    for (const auto& g : state::gate_table()) {
        INFO(g.name);
        CHECK(g.hard);
    }
    CHECK(state::default_hard_gates() == std::vector<std::string>{"identity", "smoke", "json", "determinism"});

    // A gate that is not hard, or runs only on a claim, is not required by the ledger.
    const GateSpec table[] = {
        {"a", true, GateWhen::always},
        {"soft", false, GateWhen::always},
        {"claimed", true, GateWhen::tools_claimed},
        {"b", true, GateWhen::always},
    };
    CHECK(state::default_hard_gates(table) == std::vector<std::string>{"a", "b"});
}

TEST_CASE("every gate in the table is one qualification can run: other names are none", "[qualify][gate-table]") {
    for (const auto& g : state::gate_table()) {
        INFO(g.name);
        CHECK(qualify::detail::gate_function(g.name) != nullptr);
    }
    CHECK(qualify::detail::gate_function("smoke") == &qualify::detail::smoke_gate);
    CHECK(qualify::detail::gate_function("needle") == &qualify::detail::needle_gate);
    CHECK(qualify::detail::gate_function("feasibility") == nullptr);
    CHECK(qualify::detail::gate_function("") == nullptr);
}

TEST_CASE("gate results pass the hard gates when every always-gate passed and no hard gate that ran failed", "[qualify][gate-table]") {
    struct Row {
        const char* why;
        std::map<std::string, bool> results;
        bool passed;
    };
    const std::vector<Row> rows{
        {"the four always-gates passed", kFourPass, true},
        {"nothing ran", {}, false},
        {"determinism never ran", {{"identity", true}, {"smoke", true}, {"json", true}}, false},
        {"json failed", four_pass_and({{"json", false}}), false},
        {"identity failed", four_pass_and({{"identity", false}}), false},
        {"a claimed gate passed", four_pass_and({{"tools", true}, {"needle", true}}), true},
        {"the tools gate ran and failed", four_pass_and({{"tools", false}}), false},
        {"the needle gate ran and failed", four_pass_and({{"needle", false}}), false},
        {"verdicts that are not qualification gates are ignored", four_pass_and({{"feasibility", false}, {"startup", false}}), true},
        {"a claimed gate alone is not enough", {{"tools", true}, {"needle", true}}, false},
    };
    for (const auto& row : rows) {
        INFO(row.why);
        CHECK(state::hard_gates_passed(row.results) == row.passed);
    }

    // A gate that is not hard may fail; a hard claimed gate need not run but must pass when it did.
    const GateSpec table[] = {
        {"a", true, GateWhen::always},
        {"soft", false, GateWhen::always},
        {"claimed", true, GateWhen::context_claimed},
    };
    CHECK(state::hard_gates_passed({{"a", true}, {"soft", false}}, table));
    CHECK(state::hard_gates_passed({{"a", true}}, table));
    CHECK_FALSE(state::hard_gates_passed({{"a", true}, {"claimed", false}}, table));
    CHECK_FALSE(state::hard_gates_passed({{"soft", true}}, table));
}

TEST_CASE("a qualification report judges its gates by the table and finds them by name", "[qualify][gate-table]") {
    qualify::Report report;
    CHECK_FALSE(report.hard_gates_passed());
    CHECK(report.find_gate("smoke") == nullptr);
    for (const auto& name : state::default_hard_gates()) report.gates.push_back({name, 3, 3, true, {}});
    CHECK(report.hard_gates_passed());
    report.gates.push_back({"tools", 1, 3, false, {"no tool_calls"}});
    CHECK_FALSE(report.hard_gates_passed());
    REQUIRE(report.find_gate("tools"));
    CHECK(report.find_gate("tools")->passed == 1);
    REQUIRE(report.find_gate("smoke"));
    CHECK(report.find_gate("smoke")->gate == "smoke");
    CHECK(report.find_gate("needle") == nullptr);
}

TEST_CASE("the guard validates on a local pass of every gate the table requires, naming the missing ones", "[lifecycle][gate-table]") {
    state::TransitionFacts facts;
    facts.from = state::Status::qualifying;
    facts.to = state::Status::validated;
    facts.reason = "every hard gate passed";
    facts.actor = "reconciler";
    facts.required_hard_gates = state::default_hard_gates();
    facts.hard_gates_passed_locally = {"identity", "smoke", "json", "determinism"};
    CHECK_FALSE(state::refuse_transition(facts));

    facts.hard_gates_passed_locally = {"identity", "smoke", "tools", "needle"};
    const auto refusal = state::refuse_transition(facts);
    REQUIRE(refusal);
    CHECK_THAT(*refusal, Catch::Contains("evidence guard") && Catch::Contains("missing: json; determinism"));
}
