// anvil.recipe/v1's launch.draft: each shape read, every bad one refused with the file, pointer and
// expectation; a draft model pinned (the ledger never promotes it unpinned), licensed, placed and
// digest-checked before launch like the served model; the embedded driver's argv built from the
// block; local-ai-registry drafts (seed 003's mount) read as before.
#include <catch2/catch.hpp>

#include "daemon/config/config.hpp"
#include "daemon/drivers/engine_supervisor.hpp"
#include "daemon/drivers/embedded_driver.hpp"
#include "daemon/drivers/launch_resolution.hpp"
#include "registry/document.hpp"
#include "registry/model_digest.hpp"
#include "registry/recipe_gates.hpp"
#include "state/store.hpp"
#include "test_support.hpp"

using namespace anvil::registry;
using anvil::test::read_file;
using anvil::test::all_errors;

namespace {

const std::string kDraftDigest = "sha256:" + std::string(64, 'd');

// The example f32 recipe, with the arguments these tests count on.
json example_recipe() {
    json j = json::parse(read_file(std::string(ANVIL_EXAMPLES_DIR) + "/registry/recipes/anvil-tiny-llama-f32-cpu.json"));
    j["launch"]["arguments"] = {"--weights", "f32", "--kv-dtype", "f32", "--max-context", "2048", "--max-seqs", "4"};
    return j;
}

json with_draft(json draft) {
    json j = example_recipe();
    j["launch"]["draft"] = std::move(draft);
    return j;
}

json draft_model_block() {
    return {{"path", "${MODEL_ROOT}/anvil-tiny-draft"}, {"digest", kDraftDigest}, {"dtype", "f32"}, {"licence", "MIT"}};
}

Document parse(const json& j, const std::string& path = "recipes/spec.json") {
    return parse_document(j.dump(), Provenance{"test", "", path, "", ""});
}

std::vector<std::string> errors_of(const json& j) { return parse(j).error_lines(); }

}  // namespace

TEST_CASE("each draft shape is read into the typed recipe", "[documents][draft]") {
    SECTION("self") {
        const Document doc = parse(with_draft({{"kind", "self"}, {"weights", "q8"}, {"tokens", 6}}));
        INFO(all_errors(doc));
        REQUIRE(doc.valid());
        const auto& d = doc.recipe()->launch.draft;
        REQUIRE(d);
        CHECK(d->kind == DraftKind::self);
        CHECK(d->weights == "q8");
        CHECK(d->tokens == 6);
        CHECK_FALSE(d->model);
        CHECK(doc.pins.pinned());
    }
    SECTION("model, with weights; tokens default to 4") {
        const Document doc = parse(with_draft({{"kind", "model"}, {"model", draft_model_block()}, {"weights", "bf16"}}));
        REQUIRE(doc.valid());
        const auto& d = *doc.recipe()->launch.draft;
        CHECK(d.kind == DraftKind::model);
        CHECK(d.tokens == 4);
        CHECK(d.weights == "bf16");
        REQUIRE(d.model);
        CHECK(d.model->path == "${MODEL_ROOT}/anvil-tiny-draft");
        CHECK(d.model->digest == kDraftDigest);
        CHECK(d.model->dtype == "f32");
        CHECK(d.model->licence == "MIT");
        CHECK(doc.pins.pinned());
    }
    SECTION("model, served as stored") {
        const Document doc = parse(with_draft({{"kind", "model"}, {"model", draft_model_block()}, {"tokens", 16}}));
        REQUIRE(doc.valid());
        CHECK_FALSE(doc.recipe()->launch.draft->weights);
        CHECK(doc.recipe()->launch.draft->tokens == 16);
    }
    SECTION("layers") {
        const Document doc = parse(with_draft({{"kind", "layers"}, {"layers", 2}, {"tokens", 1}}));
        REQUIRE(doc.valid());
        CHECK(doc.recipe()->launch.draft->kind == DraftKind::layers);
        CHECK(doc.recipe()->launch.draft->layers == 2);
        CHECK(doc.recipe()->launch.draft->tokens == 1);
    }
    SECTION("ngram") {
        const Document doc = parse(with_draft({{"kind", "ngram"}, {"ngram", 3}}));
        REQUIRE(doc.valid());
        CHECK(doc.recipe()->launch.draft->kind == DraftKind::ngram);
        CHECK(doc.recipe()->launch.draft->ngram == 3);
    }
    SECTION("no draft, or null: none") {
        CHECK_FALSE(parse(example_recipe()).recipe()->launch.draft);
        CHECK_FALSE(parse(with_draft(nullptr)).recipe()->launch.draft);
    }
}

TEST_CASE("a bad draft is refused with the file, the JSON pointer and what was expected", "[documents][draft]") {
    const std::string at = "recipes/spec.json: at /launch/draft";
    CHECK(errors_of(with_draft("ngram")) ==
          std::vector<std::string>{at + ": expected a draft object {\"kind\": \"self\" | \"model\" | \"layers\" | \"ngram\", …, \"tokens\": 1..16}, found \"ngram\""});
    CHECK(errors_of(with_draft({{"kind", "medusa"}})) ==
          std::vector<std::string>{at + "/kind: expected one of \"self\", \"model\", \"layers\", \"ngram\", found \"medusa\""});
    CHECK(errors_of(with_draft({{"tokens", 4}})) == std::vector<std::string>{at + "/kind: expected a string, found nothing"});
    CHECK(errors_of(with_draft({{"kind", "self"}})) ==
          std::vector<std::string>{at + "/weights: expected \"q8\" or \"bf16\": the format the target's own weights are converted to as the draft, found nothing"});
    CHECK(errors_of(with_draft({{"kind", "self"}, {"weights", "f32"}})) ==
          std::vector<std::string>{at + "/weights: expected \"q8\" or \"bf16\": the format the target's own weights are converted to as the draft, found \"f32\""});
    CHECK(errors_of(with_draft({{"kind", "self"}, {"weights", "q8"}, {"layers", 2}})) ==
          std::vector<std::string>{at + "/layers: expected no \"layers\" in a self draft (it takes kind, weights and tokens), found 2"});
    CHECK(errors_of(with_draft({{"kind", "ngram"}, {"ngram", 2}, {"token", 4}})) ==
          std::vector<std::string>{at + "/token: expected no \"token\" in an ngram draft (it takes kind, ngram and tokens), found 4"});
    for (const json& bad : {json(0), json(17), json(2.5), json("4"), json(-1)}) {
        INFO(bad.dump());
        CHECK(errors_of(with_draft({{"kind", "ngram"}, {"ngram", 2}, {"tokens", bad}})) ==
              std::vector<std::string>{at + "/tokens: expected a whole number of draft tokens from 1 to 16 (default 4), found " + bad.dump()});
    }
    CHECK(errors_of(with_draft({{"kind", "layers"}})) ==
          std::vector<std::string>{at + "/layers: expected a positive whole number of the target's layers to draft with, found nothing"});
    CHECK(errors_of(with_draft({{"kind", "layers"}, {"layers", 0}})) ==
          std::vector<std::string>{at + "/layers: expected a positive whole number of the target's layers to draft with, found 0"});
    CHECK(errors_of(with_draft({{"kind", "ngram"}, {"ngram", 65}})) ==
          std::vector<std::string>{at + "/ngram: expected a whole number of tokens from 1 to 64 for prompt lookup to match, found 65"});
    CHECK(errors_of(with_draft({{"kind", "model"}})) == std::vector<std::string>{at + "/model: expected an object, found nothing"});
    CHECK(errors_of(with_draft({{"kind", "model"}, {"model", draft_model_block()}, {"weights", "q4"}})) ==
          std::vector<std::string>{at + "/weights: expected \"f32\", \"bf16\" or \"q8\" (or no weights: the draft model as stored), found \"q4\""});
    // The draft's model block is read as launch.model is: the same fields, the same errors.
    json no_dtype = draft_model_block();
    no_dtype.erase("dtype");
    no_dtype["digest"] = "md5:1";
    CHECK(errors_of(with_draft({{"kind", "model"}, {"model", no_dtype}})) ==
          std::vector<std::string>{at + "/model/digest: expected null or \"sha256:<64 lowercase hex>\" (see `anvil model digest DIR`), found \"md5:1\"",
                                   at + "/model/dtype: expected a string, found nothing"});
}

TEST_CASE("an embedded recipe's weights are one anvil-engine serves, read into the typed precision", "[documents][weights]") {
    json j = example_recipe();
    j["launch"]["arguments"] = {"--weights", "q4_k_m", "--max-context", "2048"};
    CHECK(errors_of(j) == std::vector<std::string>{"recipes/spec.json: at /launch/arguments/1: expected one of anvil-engine's weights: "
                                                   "f32, bf16, q8, stored or auto, found \"q4_k_m\""});
    j["launch"]["arguments"] = {"--max-context", "2048", "--weights=fp8"};
    CHECK(errors_of(j) == std::vector<std::string>{"recipes/spec.json: at /launch/arguments/2: expected one of anvil-engine's weights: "
                                                   "f32, bf16, q8, stored or auto, found \"fp8\""});
    for (const auto& [flag, precision] : std::vector<std::pair<std::string, WeightsPrecision>>{
             {"f32", WeightsPrecision::f32}, {"bf16", WeightsPrecision::half}, {"q8", WeightsPrecision::eight_bit}}) {
        j["launch"]["arguments"] = {"--weights", flag};
        const Document doc = parse(j);
        INFO(flag << ": " << all_errors(doc));
        REQUIRE(doc.recipe());
        CHECK(doc.recipe()->weights == precision);
    }
}

TEST_CASE("a draft belongs to the embedded engine: other launches are invalid, and --draft-* arguments refused", "[documents][draft]") {
    json j = with_draft({{"kind", "ngram"}, {"ngram", 2}});
    j["launch"]["kind"] = "native";
    j["launch"]["arguments"] = {"/usr/bin/vllm", "serve", "/m"};
    CHECK(errors_of(j) == std::vector<std::string>{
                              "recipes/spec.json: at /launch/draft: expected no draft on a 'native' launch: launch.draft is for the embedded "
                              "engine (launch.kind \"embedded\"); vLLM and SGLang recipes give their speculative flags in launch.arguments, "
                              "found an object"});
    // The engine's own flags in the arguments would launch a draft nobody judged on paper: anvild
    // refuses the recipe (registry/owned_flags), and registry check says why.
    json flags = example_recipe();
    flags["launch"]["arguments"].push_back("--draft-model=/tmp/elsewhere");
    const Document doc = parse(flags);
    REQUIRE(doc.valid());
    CHECK(doc.warnings == std::vector<std::string>{
                              "anvild refuses this recipe: launch.arguments at /launch/arguments/8: --draft-model is a flag anvil gives "
                              "anvil-engine itself; remove it: describe the draft in /launch/draft"});
}

TEST_CASE("local-ai-registry drafts are read and pinned as before: seed 003's draft mount", "[documents][draft]") {
    const Document doc = parse_document(anvil::test::seed_text("003_"), Provenance{"seeds", "", "003.json", "", ""});
    REQUIRE(doc.valid());
    CHECK(doc.pins.pinned());
    CHECK_FALSE(doc.recipe()->launch.draft);
    const auto models = models_of(doc);
    REQUIRE(models.size() == 2);
    CHECK(models[1].repository == "incoai/GLM-5.3-Flash-DFlash2");
    CHECK(models[1].role == "mounted at /draft");
    // An unpinned draft mount stays unpinned, with the reason it always had.
    json j = json::parse(anvil::test::seed_text("003_"));
    j["data"]["launch"]["mounts"][1]["provision"]["revision"] = "main";
    const Document loose = parse_document(j.dump(), Provenance{"seeds", "", "003.json", "", ""});
    REQUIRE(loose.valid());
    CHECK(loose.pins.unpinned_reasons ==
          std::vector<std::string>{"model incoai/GLM-5.3-Flash-DFlash2 mounted at /draft is at revision 'main', not a 40-hex commit"});
}

TEST_CASE("a draft model without a content digest leaves the recipe unpinned, so never promotable", "[documents][draft][gates]") {
    json block = draft_model_block();
    block["digest"] = nullptr;
    const Document doc = parse(with_draft({{"kind", "model"}, {"model", block}}));
    REQUIRE(doc.valid());
    CHECK(doc.pins.unpinned_reasons ==
          std::vector<std::string>{"draft model directory ${MODEL_ROOT}/anvil-tiny-draft has no content digest (compute it with `anvil model digest DIR`)"});
    block["digest"] = kDraftDigest;
    block["revision"] = "main";
    const Document rev = parse(with_draft({{"kind", "model"}, {"model", block}}));
    CHECK(rev.pins.unpinned_reasons == std::vector<std::string>{"draft model revision 'main' is not a 40-hex commit"});

    GateContext ctx;
    ctx.policy.commercial = false;
    const auto a = assess_recipe(*doc.recipe(), doc.pins, models_of(doc), ctx);
    CHECK_FALSE(a.promotable);
    CHECK(a.promotion_blockers == std::vector<std::string>{"unpinned: draft model directory ${MODEL_ROOT}/anvil-tiny-draft has no content "
                                                           "digest (compute it with `anvil model digest DIR`)"});
}

TEST_CASE("the licence gate judges a draft model's licence: a non-commercial draft is refused for commercial use", "[gates][draft]") {
    SECTION("declared in the recipe's draft model block") {
        json block = draft_model_block();
        block["licence"] = "cc-by-nc-4.0";
        const Document doc = parse(with_draft({{"kind", "model"}, {"model", block}}));
        REQUIRE(doc.valid());
        GateContext ctx;
        ctx.policy.commercial = true;
        const auto a = assess_recipe(*doc.recipe(), doc.pins, models_of(doc), ctx);
        for (const auto& g : a.gates)
            if (g.name == GateName::licence) {
                CHECK(g.status == AxisStatus::fail);
                CHECK(g.reason == "${MODEL_ROOT}/anvil-tiny-draft (draft model) is cc-by-nc-4.0 per the recipe: refused for a commercial deployment");
            }
        CHECK(a.verdict == Verdict::policy_infeasible);
        CHECK_FALSE(a.promotable);
        ctx.policy.commercial = false;
        CHECK(assess_recipe(*doc.recipe(), doc.pins, models_of(doc), ctx).verdict != Verdict::policy_infeasible);
    }
    SECTION("named by hub repository: seed 000's cc-by-nc-nd-4.0 draft, as the priors record it") {
        json block = draft_model_block();
        block.erase("licence");
        block["repository"] = "incoai/GLM-5.3-Flash-DFlash2";
        const Document doc = parse(with_draft({{"kind", "model"}, {"model", block}}));
        REQUIRE(doc.valid());
        const Document priors = parse_document(anvil::test::seed_text("000_"), Provenance{"seeds", "", "000.json", "", ""});
        LicenceBook book;
        book.add(std::get<ExternalPriors>(priors.body), "seed 000");
        GateContext ctx;
        ctx.policy.commercial = true;
        ctx.licences = &book;
        const auto a = assess_recipe(*doc.recipe(), doc.pins, models_of(doc), ctx);
        CHECK(a.verdict == Verdict::policy_infeasible);
        CHECK(a.reasons.back() == "incoai/GLM-5.3-Flash-DFlash2 (draft model) is cc-by-nc-nd-4.0 per seed 000: refused for a commercial deployment");
    }
    SECTION("seed 003's draft mount, by the same priors") {
        const Document doc = parse_document(anvil::test::seed_text("003_"), Provenance{"seeds", "", "003.json", "", ""});
        const Document priors = parse_document(anvil::test::seed_text("000_"), Provenance{"seeds", "", "000.json", "", ""});
        LicenceBook book;
        book.add(std::get<ExternalPriors>(priors.body), "seed 000");
        GateContext ctx;
        ctx.policy.commercial = true;
        ctx.licences = &book;
        const auto a = assess_recipe(*doc.recipe(), doc.pins, models_of(doc), ctx);
        for (const auto& g : a.gates)
            if (g.name == GateName::licence) {
                CHECK(g.status == AxisStatus::fail);
                CHECK_THAT(g.reason, Catch::Contains("incoai/GLM-5.3-Flash-DFlash2 (mounted at /draft) is cc-by-nc-nd-4.0 per seed 000") &&
                                         Catch::EndsWith(": refused for a commercial deployment"));
            }
    }
}

TEST_CASE("the embedded driver turns the draft block into anvil-engine's flags, the draft model placed inside the allowed roots", "[driver][draft]") {
    anvil::test::TempDir roots;
    std::filesystem::create_directories(roots / "models" / "target");
    std::filesystem::create_directories(roots / "models" / "draft");
    anvil::drivers::LaunchConfig config;
    config.placeholders["MODEL_ROOT"] = (roots / "models").string();
    config.allowed_roots = {roots / "models"};
    config.port_first = 23700;
    config.port_last = 23799;

    auto argv_for = [&](const json& draft) {
        json j = with_draft(draft);
        j["launch"]["model"]["path"] = "${MODEL_ROOT}/target";
        const Document doc = parse(j);
        INFO(all_errors(doc));
        REQUIRE(doc.valid());
        const auto launch = anvil::drivers::resolve_launch(*doc.recipe(), config);
        auto argv = anvil::drivers::embedded_argv("/bin/anvil-engine", launch);
        // The model, the served name, then the draft's flags, then the recipe's own arguments.
        REQUIRE(argv.size() > 6);
        return std::vector<std::string>(argv.begin() + 6, argv.end() - 12);
    };
    const std::string real_draft = std::filesystem::canonical(roots / "models" / "draft").string();
    CHECK(argv_for({{"kind", "self"}, {"weights", "bf16"}}) == std::vector<std::string>{"--draft-self", "bf16", "--draft-tokens", "4"});
    CHECK(argv_for({{"kind", "layers"}, {"layers", 1}, {"tokens", 3}}) ==
          std::vector<std::string>{"--draft-layers", "1", "--draft-tokens", "3"});
    CHECK(argv_for({{"kind", "ngram"}, {"ngram", 2}, {"tokens", 8}}) == std::vector<std::string>{"--draft-ngram", "2", "--draft-tokens", "8"});
    json block = draft_model_block();
    block["path"] = "${MODEL_ROOT}/draft";
    CHECK(argv_for({{"kind", "model"}, {"model", block}, {"weights", "q8"}}) ==
          std::vector<std::string>{"--draft-model", real_draft, "--draft-weights", "q8", "--draft-tokens", "4"});
    CHECK(argv_for({{"kind", "model"}, {"model", block}}) == std::vector<std::string>{"--draft-model", real_draft, "--draft-tokens", "4"});

    // The draft model's path answers to the allowed roots, on paper and at launch.
    block["path"] = "/etc/draft";
    json j = with_draft({{"kind", "model"}, {"model", block}});
    j["launch"]["model"]["path"] = "${MODEL_ROOT}/target";
    const Document outside = parse(j);
    REQUIRE(outside.valid());
    const auto refusal = anvil::drivers::paper_refusal(*outside.recipe(), config);
    REQUIRE(refusal);
    CHECK_THAT(*refusal, Catch::StartsWith("recipe anvil-tiny-llama-f32-cpu at /launch/draft/model/path: '/etc/draft' resolves to") &&
                             Catch::Contains("outside the allowed roots"));
    CHECK_THROWS_AS(anvil::drivers::resolve_launch(*outside.recipe(), config), anvil::drivers::LaunchError);
}

TEST_CASE("the ledger refuses to promote a revision whose draft model is unpinned, and says so", "[state][draft]") {
    anvil::test::TempDir tmp;
    anvil::state::Store store(tmp / "state.db");
    json block = draft_model_block();
    block["digest"] = nullptr;
    const Document doc = parse(with_draft({{"kind", "model"}, {"model", block}}));
    REQUIRE(doc.valid());
    const auto r = store.ingest_revision(0, doc).revision_id;
    for (const auto& gate : anvil::state::default_hard_gates()) {
        anvil::state::EvidenceRow e;
        e.revision_id = r;
        e.metric = "gate_pass_rate:" + gate;
        e.min = e.max = Number{std::int64_t{1}};
        e.unit = "ratio";
        e.evidence_class = anvil::state::EvidenceClass::local;
        e.source = "test";
        e.receipt_sha256 = std::string(64, 'c');
        const auto id = store.add_evidence(e);
        store.add_verdict({0, r, gate, anvil::state::GateResult::pass, std::nullopt, {"passed"}, {id}, ""});
    }
    store.transition({r, anvil::state::Status::qualifying, "test", "reconciler", {}, {}, std::nullopt});
    store.transition({r, anvil::state::Status::validated, "test", "reconciler", {}, {}, std::nullopt});
    CHECK_THROWS_WITH(store.promote(r, "try", "reconciler"),
                      Catch::Contains("pinning guard") && Catch::Contains("draft model directory ${MODEL_ROOT}/anvil-tiny-draft has no content digest"));
    CHECK(store.status_of(r) == anvil::state::Status::validated);
}

TEST_CASE("before launch, anvild checks the draft model's directory and pinned digest as it checks the model's", "[daemon][draft]") {
    anvil::test::TempDir tmp;
    for (const char* name : {"target", "draft"}) {
        const auto made = anvil::test::run({ANVIL_ENGINE, "make-model", "--out", (tmp / "models" / name).string(), "--preset", "tiny"});
        REQUIRE(made.exit_code == 0);
    }
    const std::string target_digest = model_digest(tmp / "models" / "target");
    const std::string draft_digest = model_digest(tmp / "models" / "draft");
    anvil::state::Store store(tmp / "state.db");
    anvil::daemon::DaemonConfig config;
    config.data_dir = tmp / "data";
    config.model_root = tmp / "models";
    config.engine_binary = ANVIL_ENGINE;
    anvil::drivers::EngineSupervisor supervisor(anvil::daemon::supervisor_settings(config), store);
    auto recipe = [&](const std::string& dir, const json& digest) {
        json block = draft_model_block();
        block["path"] = "${MODEL_ROOT}/" + dir;
        block["digest"] = digest;
        json j = with_draft({{"kind", "model"}, {"model", block}});
        j["launch"]["model"]["path"] = "${MODEL_ROOT}/target";
        j["launch"]["model"]["digest"] = target_digest;
        const Document doc = parse(j);
        REQUIRE(doc.valid());
        return *doc.recipe();
    };
    CHECK_FALSE(supervisor.startable(recipe("draft", draft_digest)));
    const std::string real = std::filesystem::canonical(tmp / "models" / "draft").string();
    CHECK(supervisor.startable(recipe("draft", kDraftDigest)) ==
          "draft model " + real + " has digest " + draft_digest + ", but the recipe pins " + kDraftDigest);
    CHECK(supervisor.startable(recipe("gone", draft_digest)) ==
          "draft model " + (std::filesystem::canonical(tmp / "models") / "gone").string() +
              " does not exist (expected a model directory or a GGUF file)");
    // The paper judgement reads the draft's shape from the same place a launch would load it.
    CHECK(supervisor.model_directory(recipe("draft", draft_digest).launch.draft->model.value(), "/launch/draft/model/path") == real);
}
