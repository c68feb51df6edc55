// anvil registry check, run as a user would: one line per document, exit 1 when any is invalid.
#include <catch2/catch.hpp>

#include "registry/document.hpp"
#include "test_support.hpp"

using anvil::test::GitRepo;
using anvil::test::run;
using anvil::test::seed_text;
using anvil::test::TempDir;

TEST_CASE("registry check over a git registry: a table, json, and the exit status", "[cli]") {
    TempDir tmp;
    GitRepo repo(tmp / "registry");
    repo.write("recipes/tp4.json", seed_text("002_"));
    repo.write("recipes/tp2.json", seed_text("003_"));
    repo.commit("two recipes");
    const std::string data = "--data-dir=" + (tmp / "data").string();

    auto ok = run({ANVIL_CLI, "registry", "check", repo.dir().string(), "--ref", "main", data});
    INFO(ok.output);
    CHECK(ok.exit_code == 0);
    CHECK_THAT(ok.output, Catch::Contains("glm53-flash-exl3-q4-rtxpro6000-sglang-tp4  recipe  unpinned: image"));
    CHECK_THAT(ok.output, Catch::Contains("glm53-flash-exl3-tr3-4bpw-dflash2-rtxpro6000-vllm-tp2  recipe  pinned"));
    CHECK_THAT(ok.output, Catch::Contains("2 documents") && Catch::Contains("2 valid (1 pinned, 1 unpinned), 0 invalid"));

    repo.write("recipes/broken.json", "[1, 2");
    repo.commit("a broken file");
    auto bad = run({ANVIL_CLI, "registry", "check", repo.dir().string(), data, "--format", "json"});
    CHECK(bad.exit_code == 1);
    auto report = nlohmann::json::parse(bad.output);
    CHECK(report["summary"]["invalid"] == 1);
    CHECK(report["commit"] == repo.head());
    bool found = false;
    for (const auto& doc : report["documents"]) {
        if (doc["path"] != "recipes/broken.json") continue;
        found = true;
        CHECK(doc["valid"] == false);
        CHECK_THAT(doc["errors"][0]["message"].get<std::string>(), Catch::StartsWith("recipes/broken.json: "));
    }
    CHECK(found);

    auto missing_ref = run({ANVIL_CLI, "registry", "check", repo.dir().string(), "--ref", "nope", data});
    CHECK(missing_ref.exit_code == 2);
    CHECK_THAT(missing_ref.output, Catch::Contains("ref 'nope' not found"));
}

TEST_CASE("registry check reads plain directories and single files of any name", "[cli]") {
    for (const char* prefix : {"000_", "001_", "002_", "003_", "004_"}) {
        auto result = run({ANVIL_CLI, "registry", "check", anvil::test::seed_path(prefix)});
        INFO(result.output);
        CHECK(result.exit_code == 0);
        CHECK_THAT(result.output, Catch::Contains("1 valid"));
    }
    auto corpus = run({ANVIL_CLI, "registry", "check", std::string(ANVIL_CORPUS_DIR) + "/registry"});
    CHECK(corpus.exit_code == 1);
    CHECK_THAT(corpus.output, Catch::Contains("INVALID: recipe/discord-"));
    auto usage = run({ANVIL_CLI, "registry", "check"});
    CHECK(usage.exit_code == 2);
}

TEST_CASE("model digest pins a directory by its content", "[cli]") {
    TempDir tmp;
    anvil::test::write_file(tmp / "m/config.json", "{}");
    anvil::test::write_file(tmp / "m/model.safetensors", "weights");
    auto first = run({ANVIL_CLI, "model", "digest", (tmp / "m").string()});
    REQUIRE(first.exit_code == 0);
    CHECK(anvil::registry::is_sha256_digest(first.output.substr(0, first.output.size() - 1)));
    CHECK(run({ANVIL_CLI, "model", "digest", (tmp / "m").string()}).output == first.output);
    anvil::test::write_file(tmp / "m/model.safetensors", "weightz");
    CHECK(run({ANVIL_CLI, "model", "digest", (tmp / "m").string()}).output != first.output);
}
