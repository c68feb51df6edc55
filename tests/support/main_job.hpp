// The main job as README's first command runs it (scripts/run-example.sh --exit-when-settled)
// against this build, and the checks of what it printed and of the ledger it left: shared by the
// run on this host (test_main_job.cpp) and the one on a real Slurm cluster (test_slurm_live.cpp).
#pragma once

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <catch2/catch.hpp>

#include "state/inspection.hpp"
#include "state/store.hpp"
#include "test_support.hpp"

#if defined(ANVIL_MAIN_JOB_BUILD_DIR)

namespace anvil::test::main_job {

constexpr const char* speculative_id = "anvil-tiny-llama-f32-draft-layers-cpu";
constexpr const char* embedded_ids[] = {"anvil-tiny-llama-f32-cpu", "anvil-tiny-llama-f32-draft-layers-cpu", "anvil-tiny-llama-bf16-cpu",
                                        "anvil-tiny-llama-q8-cpu"};

// Runs the main job with its work directory, API and endpoint ports, and (when not empty) the
// placement file it passes to anvild as ANVIL_PLACEMENT.
inline ProcessResult run(const std::filesystem::path& work, int api_port, const std::filesystem::path& placement = {}) {
    setenv("ANVIL_BUILD_DIR", ANVIL_MAIN_JOB_BUILD_DIR, 1);
    setenv("ANVIL_WORK", work.c_str(), 1);
    setenv("ANVIL_API", ("127.0.0.1:" + std::to_string(api_port)).c_str(), 1);
    setenv("ANVIL_SERVE", ("127.0.0.1:" + std::to_string(api_port + 1)).c_str(), 1);
    setenv("ANVIL_SETTLE_SECONDS", "600", 1);
    if (placement.empty()) unsetenv("ANVIL_PLACEMENT");
    else setenv("ANVIL_PLACEMENT", placement.c_str(), 1);
    return anvil::test::run({std::string(ANVIL_SOURCE_DIR) + "/scripts/run-example.sh", "--exit-when-settled"});
}

// What every run must show, wherever its engines ran: clients never failed while the default
// switched, the speculative recipe answers as the f32 control does, the console answers, and the
// ledger holds a chain of promotions on measured evidence from the f32 first default on.
inline void check(const std::filesystem::path& work, const std::string& output) {
    CHECK_THAT(output, Catch::Contains("answered"));
    CHECK_THAT(output, Catch::Matches("(.|\n)*the stable endpoint while anvild qualified and switched defaults: [1-9][0-9]* requests, 0 failed(.|\n)*"));
    CHECK_THAT(output, Catch::Contains("greedy completions identical to the f32 control's: 8 of 8"));
    CHECK_THAT(output, Catch::Matches("(.|\n)*== the web console answers on http://127\\.0\\.0\\.1:[0-9]+/ \\(page [0-9]+ bytes, Chart\\.js [0-9]{6} bytes(.|\n)*"));

    using anvil::state::Status;
    anvil::state::Store store(work / "data" / "anvil.db");
    CHECK(anvil::state::Inspection(store).integrity_check() == "ok");
    CHECK(anvil::state::Inspection(store).statuses() == anvil::state::Inspection(store).statuses_from_ledger());
    CHECK(store.running_engines().empty());  // --exit-when-settled stops the engines with anvild
    const auto current = store.current_default();
    REQUIRE(current);
    // f32 is qualified first (the most faithful weights) and becomes the first default; the others
    // are measured against it and either replace it by the thresholds or stay validated.
    const auto f32 = store.recipe("anvil-tiny-llama-f32-cpu");
    REQUIRE(f32);
    bool f32_promoted = false;
    for (const auto& t : f32->history) f32_promoted = f32_promoted || t.to == Status::promoted;
    CHECK(f32_promoted);
    // Every promotion after the first default names the default it beat, with every check passed:
    // a chain from f32 to the current default. Which recipes are in it is this machine's figures'
    // answer: the speculative recipe usually beats f32 by far more than the 27% asked, and q8
    // comes within the thresholds of the speculative one on some machines, but a 2-core machine
    // shared with the default serving its clients has measured the speculative recipe slower.
    std::vector<std::pair<std::string, std::string>> promotions;  // (when, recipe and why)
    for (const char* id : embedded_ids) {
        const auto detail = store.recipe(id);
        REQUIRE(detail);
        for (const auto& t : detail->history)
            if (t.to == Status::promoted) promotions.emplace_back(t.created_at, std::string(id) + "\n" + t.reason);
    }
    std::sort(promotions.begin(), promotions.end());
    REQUIRE_FALSE(promotions.empty());
    std::string previous;
    for (const auto& [when, what] : promotions) {
        const std::string id = what.substr(0, what.find('\n')), reason = what.substr(what.find('\n') + 1);
        INFO(when << " " << id << ": " << reason);
        if (previous.empty()) {
            CHECK(id == "anvil-tiny-llama-f32-cpu");
            CHECK_THAT(reason, Catch::StartsWith("first default"));
        } else {
            CHECK_THAT(reason, Catch::StartsWith("beat the default " + previous + " "));
            CHECK_THAT(reason, Catch::Contains("warm_e2e gain"));
            CHECK_THAT(reason, !Catch::Contains(": fail"));
        }
        previous = id;
    }
    CHECK(previous == current->recipe_id);

    // The speculative recipe was qualified against the f32 default: no quality loss, its draft's
    // acceptance recorded.
    const auto speculative = store.recipe(speculative_id);
    REQUIRE(speculative);
    const auto speculative_revision = speculative->revisions.front().id;
    std::map<std::string, double> measured;
    for (const auto& e : speculative->evidence)
        if (e.revision_id == speculative_revision && e.evidence_class == anvil::state::EvidenceClass::local && e.min)
            measured[e.metric] = std::visit([](auto v) { return double(v); }, *e.min);
    CHECK(measured.count("draft_acceptance_ratio"));
    CHECK(measured["draft_acceptance_ratio"] > 0.5);
    CHECK(measured.count("relative_quality_loss"));
    CHECK(measured["relative_quality_loss"] < 0.001);
    // Its greedy answers were compared with the f32 control's: through the stable endpoint when it
    // is the default, else from an engine started with its recipe's flags.
    INFO("the default: " << current->recipe_id);
    if (current->recipe_id != speculative_id)
        CHECK_THAT(output, Catch::Contains(std::string("an engine started as ") + speculative_id + " starts"));
    else
        CHECK_THAT(output, Catch::Contains("the default's greedy answers beside the f32 control's"));
    for (const char* id : {"anvil-tiny-llama-bf16-cpu", "anvil-tiny-llama-q8-cpu"}) {
        const auto r = store.recipe(id);
        REQUIRE(r);
        const Status s = r->revisions.front().status;
        CHECK((s == Status::validated || s == Status::promoted || s == Status::retired));
        bool compared = false;
        for (const auto& e : r->evidence) compared = compared || (e.metric == "relative_quality_loss" && e.evidence_class == anvil::state::EvidenceClass::local);
        CHECK(compared);
    }
    // The default was promoted on local, measured evidence with a receipt.
    const auto detail = store.recipe(current->recipe_id);
    REQUIRE(detail);
    bool receipt = false;
    for (const auto& e : detail->evidence)
        receipt = receipt || (e.revision_id == current->id && e.status == anvil::registry::EvidenceStatus::measured && e.receipt_sha256);
    CHECK(receipt);
}

}  // namespace anvil::test::main_job

#endif
