// The gates beyond the calculator: registry recipes judged against this machine's inventory, the
// context requirement, pinning, licence policy and the collective path.
#include <catch2/catch.hpp>

#include "registry/document.hpp"
#include "registry/feasibility.hpp"
#include "registry/inventory.hpp"
#include "registry/recipe_gates.hpp"
#include "test_support.hpp"

using namespace anvil::registry;

namespace {

Document seed(const std::string& prefix) {
    Document doc = parse_document(anvil::test::seed_text(prefix + "_"), Provenance{"seeds", "", prefix + ".json", "", ""});
    REQUIRE(doc.valid());
    return doc;
}

Inventory declared(const json& config) {
    FieldErrors errors;
    JsonReader reader(errors);
    auto inv = parse_inventory(Node{&config, ""}, reader, "test.json");
    INFO((errors.empty() ? std::string() : errors.front().describe()));
    REQUIRE(inv);
    return *inv;
}

// Two 97887 MiB GPUs with 19 MiB idle each: the machine seed 004 describes.
json two_pro6000(const char* collectives = "unknown") {
    json gpu{{"name", "RTX PRO 6000 Blackwell Max-Q"}, {"memory_mib", 97887}, {"idle_used_mib", 19}};
    json a = gpu, b = gpu;
    a["uuid"] = "GPU-0";
    b["uuid"] = "GPU-1";
    return {{"gpus", {a, b}}, {"collectives", collectives}};
}

Requirements requirements_of(const Document& doc) { return std::get<FeasibilityInput>(doc.body).requirements; }

// Requirements asking for `tokens` of context in all.
Requirements small_requirements(std::int64_t tokens) {
    Requirements r;
    EvidenceVariable v;
    v.value = Number{tokens};
    v.unit = "tokens";
    v.status = EvidenceStatus::assumed;
    v.source = "test";
    r.tokens.emplace_back("prompt", v);
    return r;
}

const Gate& gate(const RecipeAssessment& a, GateName name) {
    for (const auto& g : a.gates)
        if (g.name == name) return g;
    FAIL("no gate " << to_string(name));
    return a.gates.front();
}

LicenceBook seed_licences() {
    LicenceBook book;
    book.add(std::get<ExternalPriors>(seed("000").body), "seed 000");
    return book;
}

// Judges seed 003 (TP2, 98304-token context, draft under cc-by-nc-nd-4.0) with what `edit` sets.
template <typename Edit>
RecipeAssessment assess_seed_003(Edit edit) {
    const Document doc = seed("003");
    const Inventory inventory = declared(two_pro6000());
    const Requirements requirements = small_requirements(65536);
    const LicenceBook licences = seed_licences();
    GateContext ctx{&inventory, &requirements, LicencePolicy{false}, &licences, 96.0, {}, {}};
    Inventory edited_inventory = inventory;
    edit(ctx, edited_inventory);
    if (ctx.inventory) ctx.inventory = &edited_inventory;
    return assess_recipe(*doc.recipe(), doc.pins, models_of(doc), ctx);
}

}  // namespace

TEST_CASE("seed 002 needs 4 GPUs: proven infeasible on a declared two-GPU machine", "[gates]") {
    const Document doc = seed("002");
    const Inventory inventory = declared(two_pro6000());
    GateContext ctx;
    ctx.inventory = &inventory;
    const auto a = assess_recipe(*doc.recipe(), doc.pins, models_of(doc), ctx);
    CHECK(gate(a, GateName::gpu_count).status == AxisStatus::fail);
    CHECK(gate(a, GateName::gpu_count).reason == "needs 4 GPUs, inventory has 2");
    CHECK(a.verdict == Verdict::proven_infeasible);
    CHECK(a.reasons == std::vector<std::string>{"needs 4 GPUs, inventory has 2"});
}

TEST_CASE("a GPU shortfall on an assumed inventory is only modeled-infeasible", "[gates]") {
    const Document doc = seed("002");
    json config = two_pro6000();
    for (auto& g : config["gpus"]) g["status"] = "assumed";
    const Inventory inventory = declared(config);
    GateContext ctx;
    ctx.inventory = &inventory;
    CHECK(assess_recipe(*doc.recipe(), doc.pins, models_of(doc), ctx).verdict == Verdict::modeled_infeasible);
}

TEST_CASE("without an inventory the hardware gates are unknown and the recipe unresolved", "[gates]") {
    const Document doc = seed("003");
    const auto a = assess_recipe(*doc.recipe(), doc.pins, models_of(doc), GateContext{});
    CHECK(gate(a, GateName::gpu_count).status == AxisStatus::unknown);
    CHECK(gate(a, GateName::gpu_memory).status == AxisStatus::unknown);
    CHECK(gate(a, GateName::context).status == AxisStatus::unknown);
    CHECK(a.verdict == Verdict::unresolved);
}

TEST_CASE("seed 003's 98304-token context is proven infeasible against seed 004's requirement", "[gates]") {
    const Document doc = seed("003");
    const Requirements requirements = requirements_of(seed("004"));
    const Inventory inventory = declared(two_pro6000());
    GateContext ctx;
    ctx.inventory = &inventory;
    ctx.requirements = &requirements;
    const auto a = assess_recipe(*doc.recipe(), doc.pins, models_of(doc), ctx);
    CHECK(gate(a, GateName::context).status == AxisStatus::fail);
    CHECK(a.verdict == Verdict::proven_infeasible);
    CHECK(a.reasons == std::vector<std::string>{"max context 98304 < T_req 258192 tokens"});
}

TEST_CASE("an unpinned recipe can never be promoted, whatever its verdict", "[gates]") {
    const Document doc = seed("002");
    REQUIRE_FALSE(doc.pins.pinned());
    const auto a = assess_recipe(*doc.recipe(), doc.pins, models_of(doc), GateContext{});
    CHECK(gate(a, GateName::pinning).status == AxisStatus::fail);
    CHECK(gate(a, GateName::pinning).reason.starts_with("unpinned: image 'glm53-flash-sglang-exl3:stage-20260827-r6'"));
    CHECK_FALSE(a.promotable);
    CHECK(a.promotion_blockers.front() == gate(a, GateName::pinning).reason);
    // Pinning blocks promotion; it does not make the recipe infeasible.
    CHECK(a.verdict == Verdict::unresolved);
}

TEST_CASE("seed 003's cc-by-nc-nd-4.0 draft is refused for a commercial deployment", "[gates]") {
    const auto a = assess_seed_003([](GateContext& ctx, Inventory& inv) {
        ctx.policy.commercial = true;
        inv.collectives = CollectivePath::proven;
    });
    const Gate& g = gate(a, GateName::licence);
    CHECK(g.status == AxisStatus::fail);
    CHECK(g.reason ==
          "incoai/GLM-5.3-Flash-DFlash2 (mounted at /draft) is cc-by-nc-nd-4.0 per seed 000: refused for a commercial deployment");
    CHECK(a.verdict == Verdict::policy_infeasible);
    CHECK_FALSE(a.promotable);
}

TEST_CASE("a non-commercial licence is an open question while the policy is unset", "[gates]") {
    const auto a = assess_seed_003([](GateContext& ctx, Inventory& inv) {
        ctx.policy.commercial.reset();
        inv.collectives = CollectivePath::proven;
    });
    CHECK(gate(a, GateName::licence).status == AxisStatus::unknown);
    CHECK(a.verdict == Verdict::benchmark_survivor);  // may run here; may not be promoted yet
    CHECK_FALSE(a.promotable);
    CHECK(a.promotion_blockers.front().starts_with("licence: incoai/GLM-5.3-Flash-DFlash2 (mounted at /draft) is cc-by-nc-nd-4.0"));
}

TEST_CASE("tensor parallelism 2 with an unprobed collective path is unresolved", "[gates]") {
    const auto a = assess_seed_003([](GateContext&, Inventory&) {});
    CHECK(gate(a, GateName::collectives).status == AxisStatus::unknown);
    CHECK(gate(a, GateName::collectives).reason == "tensor parallelism 2 needs a proven collective path on this host (unknown until probed)");
    CHECK(a.verdict == Verdict::unresolved);
    CHECK(a.promotable);  // local qualification may still probe it
}

TEST_CASE("a failed collective probe rules a TP>1 recipe out: a proven one lets it through", "[gates]") {
    CHECK(assess_seed_003([](GateContext&, Inventory& inv) { inv.collectives = CollectivePath::failed; }).verdict ==
          Verdict::proven_infeasible);
    const auto ok = assess_seed_003([](GateContext&, Inventory& inv) { inv.collectives = CollectivePath::proven; });
    CHECK(ok.verdict == Verdict::benchmark_survivor);
    CHECK(ok.promotable);
    CHECK(ok.reasons.back() == "every gate passes on paper; only local qualification authorizes promotion");
}

TEST_CASE("per-GPU memory is judged against the hardware record's nominal gigabytes", "[gates]") {
    const auto fits = assess_seed_003([](GateContext&, Inventory&) {});
    CHECK(gate(fits, GateName::gpu_memory).status == AxisStatus::pass);  // 97887 MiB ≥ 96 GB
    const auto small = assess_seed_003([](GateContext&, Inventory& inv) {
        for (auto& g : inv.gpus) g.total_bytes.value = Number{std::int64_t{24} * 1024 * 1024 * 1024};
    });
    CHECK(gate(small, GateName::gpu_memory).status == AxisStatus::fail);
    CHECK(small.verdict == Verdict::proven_infeasible);
    const auto unknown = assess_seed_003([](GateContext& ctx, Inventory&) { ctx.hardware_vram_gb.reset(); });
    CHECK(gate(unknown, GateName::gpu_memory).status == AxisStatus::unknown);
}

TEST_CASE("licences are looked up case-insensitively and the NC family is recognised", "[gates]") {
    const LicenceBook book = seed_licences();
    REQUIRE(book.find("INCOAI/glm-5.3-flash-dflash2"));
    CHECK(book.find("incoai/GLM-5.3-Flash-DFlash2")->licence == "cc-by-nc-nd-4.0");
    CHECK(book.find("someone/else") == nullptr);
    CHECK(is_non_commercial("cc-by-nc-nd-4.0"));
    CHECK(is_non_commercial("CC-BY-NC-4.0"));
    CHECK(is_non_commercial("research non-commercial licence"));
    CHECK_FALSE(is_non_commercial("apache-2.0"));
    CHECK_FALSE(is_non_commercial("mit"));
}

TEST_CASE("a recipe's models include its served repository and every provisioned mount", "[gates]") {
    const auto models = models_of(seed("003"));
    REQUIRE(models.size() == 2);
    CHECK(models[0].repository == "brandonmusic/GLM-5.3-Flash-tr3-4bpw");
    CHECK(models[1].repository == "incoai/GLM-5.3-Flash-DFlash2");
    CHECK(models[1].role == "mounted at /draft");
}

// --- the inventory ----------------------------------------------------------------------------

TEST_CASE("a declared inventory reproduces seed 004's VRAM figures exactly", "[gates][inventory]") {
    const Inventory inventory = declared(two_pro6000());
    CHECK(inventory.total_vram().value == Number{std::int64_t{205283917824}});
    CHECK(inventory.idle_allocations().value == Number{std::int64_t{39845888}});
    CHECK(inventory.evidence() == EvidenceStatus::confirmed);

    FeasibilityInput in = std::get<FeasibilityInput>(seed("004").body);
    in.requirements = with_inventory(in.requirements, inventory);
    const FeasibilityResult r = evaluate_feasibility(in);
    CHECK(r.physical_available == IntInterval::exact(205244071936));
    CHECK(r.policy_available == IntInterval::exact(195019721933));
    CHECK(r.candidates[0].policy_t_max == IntInterval{1154604, 1542488});
}

TEST_CASE("an inventory figure must be given once, in MiB or bytes", "[gates][inventory]") {
    json config = two_pro6000();
    config["gpus"][0]["memory_bytes"] = 1;
    FieldErrors errors;
    JsonReader reader(errors);
    CHECK_FALSE(parse_inventory(Node{&config, ""}, reader, "test.json"));
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].pointer == "/gpus/0/memory_mib");
}

TEST_CASE("nvidia-smi's CSV becomes a measured inventory", "[gates][inventory]") {
    std::string error;
    const auto inv = parse_nvidia_smi("GPU-aaa, NVIDIA H200, 143771, 0\nGPU-bbb, NVIDIA RTX PRO 6000, Max-Q, 97887, 19\n", "2026-08-29T00:00:00Z", error);
    REQUIRE(inv);
    REQUIRE(inv->gpus.size() == 2);
    CHECK(inv->gpus[0].name == "NVIDIA H200");
    CHECK(inv->gpus[0].total_bytes.value == Number{std::int64_t{143771} * 1024 * 1024});
    CHECK(inv->gpus[1].name == "NVIDIA RTX PRO 6000, Max-Q");
    CHECK(inv->gpus[1].idle_used_bytes.value == Number{std::int64_t{19} * 1024 * 1024});
    CHECK(inv->evidence() == EvidenceStatus::measured);
    CHECK_FALSE(parse_nvidia_smi("No devices were found\n", "", error));
    CHECK(error.starts_with("nvidia-smi line 1"));
}

// --- the command ------------------------------------------------------------------------------

TEST_CASE("`anvil feasibility` judges seeds 002 and 003 against a declared two-GPU machine", "[gates][cli]") {
    anvil::test::TempDir dir;
    anvil::test::write_file(dir / "inventory.json", two_pro6000().dump());
    std::vector<std::string> argv{ANVIL_CLI, "feasibility"};
    for (const char* s : {"000_", "002_", "003_", "004_"}) argv.push_back(anvil::test::seed_path(s));
    argv.insert(argv.end(), {"--inventory", (dir / "inventory.json").string(), "--commercial", "yes", "--format", "json"});
    const auto result = anvil::test::run(argv);
    REQUIRE(result.exit_code == 0);
    const std::string& out = result.output;
    const json report = json::parse(out);
    CHECK(report["schema"] == "anvil.feasibility-report/v1");
    CHECK(report["feasibility"][0]["physical_available_bytes"]["min"] == 205244071936);
    CHECK(report["feasibility"][0]["ledger"]["/requirements/physical_vram_bytes"]["status"] == "confirmed");
    const json& tp4 = report["recipes"][0];
    CHECK(tp4["id"] == "glm53-flash-exl3-q4-rtxpro6000-sglang-tp4");
    CHECK(tp4["class"] == "proven-infeasible");
    CHECK(tp4["gates"]["gpu_count"]["reason"] == "needs 4 GPUs, inventory has 2");
    CHECK(tp4["promotable"] == false);
    const json& tp2 = report["recipes"][1];
    CHECK(tp2["class"] == "proven-infeasible");
    CHECK(tp2["gates"]["context"]["status"] == "fail");
    CHECK(tp2["gates"]["licence"]["status"] == "fail");
    CHECK(tp2["gates"]["collectives"]["status"] == "unknown");
}
