// Documents: every seed and corpus record is read into its typed model, bad input gets one clear
// error per problem naming file, JSON pointer and expectation, and records round-trip unchanged.
#include <catch2/catch.hpp>

#include <filesystem>

#include "registry/catalog.hpp"
#include "registry/document.hpp"
#include "test_support.hpp"

using namespace anvil::registry;
using anvil::test::read_file;
using anvil::test::seed_text;
using anvil::test::all_errors;

namespace {

Document parse(const std::string& text, const std::string& path = "doc.json") {
    return parse_document(text, Provenance{"test", "", path, "", ""});
}

bool has_error_at(const Document& doc, const std::string& pointer) {
    for (const auto& e : doc.errors)
        if (e.pointer == pointer) return true;
    return false;
}

json seed_json(const std::string& prefix) { return json::parse(seed_text(prefix)); }

Document from_json(const json& j, const std::string& path = "doc.json") { return parse(j.dump(), path); }

}  // namespace

TEST_CASE("every seed is read into its typed model", "[documents][seeds]") {
    auto priors = parse(seed_text("000_"));
    CHECK(priors.valid());
    CHECK(priors.kind == DocumentKind::external_priors);
    CHECK(priors.is_external_prior());
    REQUIRE(std::holds_alternative<ExternalPriors>(priors.body));
    const auto& p = std::get<ExternalPriors>(priors.body);
    CHECK(p.candidate.revision == "319d66a8b53092b491f698440ecea781e4ddd4e4");
    REQUIRE(p.draft);
    CHECK(p.draft->license == "cc-by-nc-nd-4.0");
    CHECK(p.published_context_tokens == 1048576);

    auto publication = parse(seed_text("001_"));
    CHECK(publication.valid());
    CHECK(publication.kind == DocumentKind::runtime_publication);
    CHECK(publication.is_external_prior());
    const auto& pub = std::get<RuntimePublication>(publication.body);
    CHECK(pub.pinned_image() ==
          "verdictai/glm53-flash-exl3-k4@sha256:15192e3930b4ae5558271ebe7d1a5a02da6dcc5a6c292c44e79a3fb8c883b5e1");
    CHECK(pub.source_commits.at("vllm_base_commit") == "df684ff47dcbf088b41311494fd20347a702e56a");
    CHECK(pub.profile_max_model_len.at("daily") == 435456);

    auto tp4 = parse(seed_text("002_"));
    INFO(all_errors(tp4));
    CHECK(tp4.valid());
    CHECK(tp4.envelope_meta.has_value());
    REQUIRE(tp4.recipe());
    CHECK(tp4.id == "glm53-flash-exl3-q4-rtxpro6000-sglang-tp4");
    CHECK(tp4.recipe()->hardware_count == 4);
    CHECK(tp4.recipe()->effective_tensor_parallel() == 4);
    CHECK(tp4.recipe()->served_model_name() == "glm-5.3-flash-exl3-q4");

    auto tp2 = parse(seed_text("003_"));
    CHECK(tp2.valid());
    REQUIRE(tp2.recipe());
    CHECK(tp2.recipe()->serving.max_context_tokens == 98304);
    CHECK(tp2.recipe()->launch.mounts.at(1).provision->repository == "incoai/GLM-5.3-Flash-DFlash2");
    CHECK(tp2.recipe()->launch.environment.at("NCCL_P2P_LEVEL") == "4");

    auto feasibility = parse(seed_text("004_"));
    CHECK(feasibility.valid());
    const auto& input = std::get<FeasibilityInput>(feasibility.body);
    CHECK(input.campaign == "glm53-k3-dflash2-dual-pro6000-wsl2-default");
    CHECK(input.candidates.size() == 4);
    CHECK(input.requirements.vram_reserves.size() == 2);
    CHECK(std::get<std::int64_t>(*input.requirements.physical_vram_bytes.value) == 205283917824);
}

TEST_CASE("seed 002 is unpinned because its image is mutable: seed 003 is pinned", "[documents][pinning]") {
    auto tp4 = parse(seed_text("002_"));
    REQUIRE_FALSE(tp4.pins.pinned());
    REQUIRE(tp4.pins.unpinned_reasons.size() == 1);
    CHECK_THAT(tp4.pins.unpinned_reasons[0], Catch::Contains("not pinned by digest") && Catch::Contains("mutable"));
    CHECK(parse(seed_text("003_")).pins.pinned());
}

TEST_CASE("records round-trip with unknown fields and their envelope kept", "[documents]") {
    for (const char* prefix : {"000_", "001_", "002_", "003_", "004_"}) {
        INFO(prefix);
        auto doc = parse(seed_text(prefix));
        CHECK(doc.to_json() == seed_json(prefix));
    }
}

TEST_CASE("the corpus is read: valid records pass, the malformed recipe is rejected with reasons", "[documents][corpus]") {
    auto catalog = Catalog::from_filesystem(std::string(ANVIL_CORPUS_DIR) + "/registry");
    CHECK(catalog.size() == 14);  // schema files are not documents
    std::size_t invalid = 0;
    for (const auto& [path, doc] : catalog.documents()) {
        if (!doc.valid()) ++invalid;
    }
    CHECK(invalid == 1);
    const auto* discord = catalog.find(DocumentKind::recipe,
                                       "discord-0xsero-glm-5-2-nvfp4-reap-469b-nvfp4-reap-rtx-pro-6000-blackwell-96gb-tp0");
    REQUIRE(discord);
    CHECK_FALSE(discord->valid());
    CHECK(has_error_at(*discord, "/hardware_count"));
    CHECK(has_error_at(*discord, "/engine/name"));
    CHECK(has_error_at(*discord, "/id"));
    CHECK(has_error_at(*discord, "/launch/arguments/3"));
    for (const auto& line : discord->error_lines()) CHECK_THAT(line, Catch::StartsWith("recipe/discord-"));

    // The spelling `speed_sweeps_ids` is accepted.
    const auto* acereason = catalog.find(DocumentKind::recipe, "acereason-nemotron-1-1-7b-q4-k-m-rtx-3060-12gb-llama-cpp-tp1");
    REQUIRE(acereason);
    CHECK(acereason->valid());
    CHECK(acereason->recipe()->speed_sweep_ids.size() == 1);
    CHECK_FALSE(acereason->pins.pinned());  // a reference launch is no launch contract

    // launch.image and the digest recorded in launch.container disagree: evaluable, not pinned.
    const auto* qwen = catalog.find(DocumentKind::recipe, "qwen38-q4km-arcb70-llamacpp-tp1");
    REQUIRE(qwen);
    CHECK(qwen->valid());
    CHECK_FALSE(qwen->pins.pinned());
    CHECK_FALSE(qwen->warnings.empty());

    const auto* gemma = catalog.find(DocumentKind::recipe, "gemma-4-12b-it-nvfp4-rtxpro6000-sglang-tp1");
    REQUIRE(gemma);
    CHECK(gemma->valid());
    CHECK(gemma->pins.pinned());
    CHECK(catalog.find(DocumentKind::hardware, "rtx-3060-12gb"));
    CHECK(catalog.find(DocumentKind::speed_sweep, "gemma-4-12b-it-nvfp4-rtxpro4500-sglang-tp1-sweep"));
}

TEST_CASE("malformed JSON names the file and the line and column", "[documents][errors]") {
    auto doc = parse("{\n  \"schema_version\": \"local-ai-registry/v1\",\n  \"id\": oops\n}", "recipe/broken.json");
    REQUIRE(doc.errors.size() == 1);
    CHECK(doc.errors[0].pointer.empty());
    auto line = doc.error_lines()[0];
    CHECK_THAT(line, Catch::StartsWith("recipe/broken.json: ") && Catch::Contains("line 3"));
}

TEST_CASE("a number beyond a double's range is an error naming where it is, not an exception", "[documents][errors]") {
    // Found by the fuzzer: well-formed JSON whose number overflows made the parser throw out_of_range.
    auto doc = parse("{\n  \"schema_version\": \"local-ai-registry/v1\",\n  \"x\": 0.02401641e383556018\n}",
                     "recipe/overflow.json");
    REQUIRE(doc.errors.size() == 1);
    CHECK_FALSE(doc.valid());
    auto line = doc.error_lines()[0];
    CHECK_THAT(line, Catch::StartsWith("recipe/overflow.json: ") && Catch::Contains("line 3, column 8") &&
                         Catch::Contains("number overflow"));
}

TEST_CASE("an unknown schema or schema_version is one error at that pointer", "[documents][errors]") {
    auto j = seed_json("000_");
    j["schema"] = "anvil-serving.external-priors/v9";
    auto doc = from_json(j);
    REQUIRE(doc.errors.size() == 1);
    CHECK(doc.errors[0].pointer == "/schema");
    CHECK_THAT(doc.errors[0].expected, Catch::Contains("anvil-serving.external-priors/v1"));

    auto r = seed_json("003_");
    r["data"]["schema_version"] = "local-ai-registry/v2";
    auto recipe = from_json(r);
    REQUIRE(recipe.errors.size() == 1);
    CHECK(recipe.errors[0].pointer == "/data/schema_version");

    auto none = parse(R"({"id": "x"})");
    REQUIRE(none.errors.size() == 1);
    CHECK_THAT(none.errors[0].expected, Catch::Contains("schema_version"));
}

TEST_CASE("container.state must agree with the digest", "[documents][pinning]") {
    auto j = seed_json("003_");
    SECTION("digest-pinned without a digest") {
        j["data"]["launch"]["container"]["digest"] = nullptr;
        auto doc = from_json(j);
        CHECK(has_error_at(doc, "/data/launch/container/digest"));
    }
    SECTION("mutable with a digest") {
        j["data"]["launch"]["container"]["state"] = "mutable";
        auto doc = from_json(j);
        CHECK(has_error_at(doc, "/data/launch/container/state"));
    }
    SECTION("a malformed digest") {
        j["data"]["launch"]["container"]["digest"] = "sha256:XYZ";
        auto doc = from_json(j);
        CHECK(has_error_at(doc, "/data/launch/container/digest"));
    }
    SECTION("container.image pinned to another digest than the one recorded") {
        j["data"]["launch"]["container"]["image"] =
            "verdictai/x@sha256:1111111111111111111111111111111111111111111111111111111111111111";
        auto doc = from_json(j);
        CHECK(has_error_at(doc, "/data/launch/container/image"));
    }
}

TEST_CASE("revisions must be 40-hex commits to count as pinned", "[documents][pinning]") {
    auto j = seed_json("003_");
    j["data"]["launch"]["mounts"][1]["provision"]["revision"] = "main";
    auto doc = from_json(j);
    CHECK(doc.valid());
    REQUIRE_FALSE(doc.pins.pinned());
    CHECK_THAT(doc.pins.unpinned_reasons[0], Catch::Contains("'main'") && Catch::Contains("incoai/GLM-5.3-Flash-DFlash2"));

    auto priors = seed_json("000_");
    priors["candidate"]["revision"] = "v1.0";
    auto bad = from_json(priors);
    CHECK(has_error_at(bad, "/candidate/revision"));
}

TEST_CASE("pinning primitives", "[pinning]") {
    const std::string digest = "sha256:0f1cdcc8891f1cc3a444121eb61d366289a1cbba285f0892dcbb24bc94961692";
    CHECK(is_sha256_digest(digest));
    CHECK_FALSE(is_sha256_digest("sha256:0F1CDCC8891F1CC3A444121EB61D366289A1CBBA285F0892DCBB24BC94961692"));
    CHECK_FALSE(is_sha256_digest("sha256:0f1c"));
    CHECK(is_pinned_image("repo/name:tag@" + digest));
    CHECK(is_pinned_image("repo/name@" + digest));
    CHECK_FALSE(is_pinned_image("repo/name:tag"));
    CHECK_FALSE(is_pinned_image("repo/name@sha256:short"));
    CHECK(image_digest("a@" + digest) == digest);
    CHECK(is_commit_id("319d66a8b53092b491f698440ecea781e4ddd4e4"));
    CHECK_FALSE(is_commit_id("319d66a8"));
    CHECK_FALSE(is_commit_id("main"));
}

TEST_CASE("embedded-engine recipes read like container recipes and pin their model by digest", "[documents][embedded]") {
    auto text = read_file(std::string(ANVIL_EXAMPLES_DIR) + "/registry/recipes/anvil-tiny-llama-f32-cpu.json");
    auto doc = parse(text);
    INFO(all_errors(doc));
    REQUIRE(doc.valid());
    REQUIRE(doc.recipe());
    CHECK(doc.recipe()->launch.kind == "embedded");
    CHECK(doc.recipe()->launch.model->dtype == "f32");
    CHECK(doc.recipe()->served_model_name() == "anvil-tiny-llama");
    CHECK(doc.pins.pinned());

    auto j = json::parse(text);
    j["launch"]["model"]["digest"] = nullptr;
    auto unpinned = from_json(j);
    REQUIRE_FALSE(unpinned.pins.pinned());
    CHECK_THAT(unpinned.pins.unpinned_reasons[0], Catch::Contains("no content digest"));
    j["launch"]["model"]["digest"] = "md5:abc";
    CHECK(has_error_at(from_json(j), "/launch/model/digest"));
    j["launch"].erase("model");
    CHECK(has_error_at(from_json(j), "/launch/model"));

    // `embedded` is anvil's own launch kind: a local-ai-registry/v1 record may not claim it.
    auto foreign = json::parse(text);
    foreign["schema_version"] = "local-ai-registry/v1";
    CHECK(has_error_at(from_json(foreign), "/launch/kind"));
}

TEST_CASE("evidence variables are validated", "[documents][evidence]") {
    auto j = seed_json("004_");
    auto& prompt = j["requirements"]["tokens"]["prompt"];
    SECTION("value excludes bounds") {
        prompt["min"] = 1;
        CHECK(has_error_at(from_json(j), "/requirements/tokens/prompt/min"));
    }
    SECTION("negative numbers") {
        prompt["value"] = -5;
        CHECK(has_error_at(from_json(j), "/requirements/tokens/prompt/value"));
    }
    SECTION("estimated needs distinct min and max") {
        prompt.erase("value");
        prompt["status"] = "estimated";
        prompt["min"] = 5;
        prompt["max"] = 5;
        CHECK(has_error_at(from_json(j), "/requirements/tokens/prompt"));
    }
    SECTION("min above max") {
        prompt.erase("value");
        prompt["min"] = 9;
        prompt["max"] = 5;
        CHECK(has_error_at(from_json(j), "/requirements/tokens/prompt/max"));
    }
    SECTION("unknown needs notes, known needs a source") {
        auto& metric = j["candidates"][0]["metrics"]["quality_score"];
        metric.erase("notes");
        prompt.erase("source");
        auto doc = from_json(j);
        CHECK(has_error_at(doc, "/candidates/0/metrics/quality_score/notes"));
        CHECK(has_error_at(doc, "/requirements/tokens/prompt/source"));
    }
    SECTION("an unknown status") {
        prompt["status"] = "guessed";
        CHECK(has_error_at(from_json(j), "/requirements/tokens/prompt/status"));
    }
}

TEST_CASE("one bad document never stops the others, and ids are unique per kind", "[documents][catalog]") {
    anvil::test::TempDir dir;
    anvil::test::write_file(dir / "a.json", seed_text("003_"));
    anvil::test::write_file(dir / "b.json", seed_text("003_"));
    anvil::test::write_file(dir / "c.json", "{ not json");
    anvil::test::write_file(dir / "d.json", seed_text("000_"));
    anvil::test::write_file(dir / "notes.txt", "not a document");
    auto catalog = Catalog::from_filesystem(dir.path());
    REQUIRE(catalog.size() == 4);
    const auto& a = catalog.documents().at("a.json");
    const auto& b = catalog.documents().at("b.json");
    CHECK(catalog.usable(a));
    CHECK_FALSE(catalog.usable(b));
    REQUIRE(catalog.duplicate_of(b) == "a.json");
    CHECK_THAT(catalog.problems(b).at(0), Catch::StartsWith("b.json: at /id") && Catch::Contains("already defined by a.json"));
    CHECK_FALSE(catalog.documents().at("c.json").valid());
    CHECK(catalog.usable(catalog.documents().at("d.json")));
}

TEST_CASE("the example embedded recipes pin exactly what make-model writes", "[documents][embedded]") {
    anvil::test::TempDir tmp;
    const auto model = tmp / "anvil-tiny-llama-early-exit-seed1";
    auto made = anvil::test::run({ANVIL_ENGINE, "make-model", "--out", model.string(), "--preset", "small", "--layers", "8",
                                  "--early-exit", "1", "--seed", "1"});
    INFO(made.output);
    REQUIRE(made.exit_code == 0);
    auto digest = anvil::test::run({ANVIL_CLI, "model", "digest", model.string()});
    REQUIRE(digest.exit_code == 0);
    const std::string computed = digest.output.substr(0, digest.output.find('\n'));
    for (const char* variant : {"f32", "bf16", "q8", "f32-draft-layers"}) {
        auto j = json::parse(read_file(std::string(ANVIL_EXAMPLES_DIR) + "/registry/recipes/anvil-tiny-llama-" + variant + "-cpu.json"));
        INFO(variant);
        CHECK(j["launch"]["model"]["digest"] == computed);
    }
}

TEST_CASE("an anvil recipe may give its engine its own readiness timeout", "[documents][embedded]") {
    auto j = json::parse(read_file(std::string(ANVIL_EXAMPLES_DIR) + "/registry/recipes/anvil-tiny-llama-f32-cpu.json"));
    REQUIRE_FALSE(parse(j.dump(), "recipes/a.json").recipe()->launch.ready_timeout_seconds);  // unset: the daemon's
    j["launch"]["ready_timeout_seconds"] = 1800;
    const Document slow = parse(j.dump(), "recipes/a.json");
    INFO(all_errors(slow));
    REQUIRE(slow.valid());
    CHECK(slow.recipe()->launch.ready_timeout_seconds == 1800);
    for (const json& bad : {json("600"), json(0), json(1.5), json(86401)}) {
        j["launch"]["ready_timeout_seconds"] = bad;
        const Document doc = parse(j.dump(), "recipes/a.json");
        INFO(bad.dump() << ": " << all_errors(doc));
        CHECK_FALSE(doc.valid());
        CHECK(has_error_at(doc, "/launch/ready_timeout_seconds"));
        CHECK(all_errors(doc).find("a whole number of seconds from 1 to 86400") != std::string::npos);
    }
}
