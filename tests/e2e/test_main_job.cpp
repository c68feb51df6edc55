// The main job, exactly as README's first command runs it (scripts/run-example.sh), against this
// build: the example registry becomes a git repository, anvild judges, qualifies and promotes, and
// serves the default on the stable endpoint. Then the ledger it left is checked (main_job.hpp).
#include <catch2/catch.hpp>

#include "main_job.hpp"

#if defined(ANVIL_MAIN_JOB_BUILD_DIR)

TEST_CASE("the main job qualifies the example recipes, promotes by the thresholds and records why", "[main-job][e2e]") {
    anvil::test::TempDir work;
    const auto result = anvil::test::main_job::run(work.path(), 16790);
    INFO(result.output);
    REQUIRE(result.exit_code == 0);
    anvil::test::main_job::check(work.path(), result.output);

    // The GPU recipes cannot run on this machine's inventory, or are unpinned: rejected on paper.
    anvil::state::Store store(work / "data" / "anvil.db");
    for (const char* id : {"glm53-flash-exl3-q4-rtxpro6000-sglang-tp4", "glm53-flash-exl3-tr3-4bpw-dflash2-rtxpro6000-vllm-tp2"}) {
        const auto r = store.recipe(id);
        REQUIRE(r);
        CHECK(r->revisions.front().status == anvil::state::Status::rejected);
    }
}

#endif
