// The embedded engine's memory on paper: the target's weights and KV cache, and what each draft
// kind adds (self q8 and bf16: a converted copy and a cache of its own; model: its weights and
// cache; layers and ngram: nothing), worked out by hand on a small shape; the same rules checked
// against what anvil-engine really allocates (on a GPU too, as the engine accounts for it); and the
// host_memory and engine_gpu_memory gates that judge the totals.
#include <catch2/catch.hpp>

#include "engine/config.hpp"
#include "engine/kv_cache.hpp"
#include "engine/runner.hpp"
#include "engine/weights.hpp"
#include "registry/document.hpp"
#include "registry/embedded_memory.hpp"
#include "registry/host_memory.hpp"
#include "registry/recipe_gates.hpp"
#include "test_support.hpp"

using namespace anvil::registry;
using anvil::test::read_file;

namespace {

// hidden 64, MLP 128, 2 layers, 4 heads of 16, 2 KV heads, vocabulary 250 (not a multiple of 16,
// so the packed q8 layout pads the embedding's rows: 250 → 256).
json target_config() {
    return {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2},
            {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"vocab_size", 250}, {"tie_word_embeddings", false}};
}

// The same family, one layer, its embedding tied to its head.
json draft_config() {
    json c = target_config();
    c["num_hidden_layers"] = 1;
    c["tie_word_embeddings"] = true;
    return c;
}

// By hand. Per layer: q 64x64, k and v 32x64, o 64x64, gate and up 128x64, down 64x128 = 36864
// weights; embedding and head 250x64 each = 32000; in all 2 x 36864 + 32000 = 105728 weights.
// Norms: 2 x 64 per layer and 64 final = 320 floats = 1280 bytes.
constexpr std::int64_t kTargetWeightsF32 = 105728 * 4 + 1280;           // 424192
// q8: packed with f16 scales (rows of 250 padded to 256) the least, row-major with f32 ones the most.
constexpr std::int64_t kTargetMatricesQ8Min = 106496 + 106496 / 32 * 2;  // 113152
constexpr std::int64_t kTargetMatricesQ8Max = 105728 + 105728 / 32 * 4;  // 118944
constexpr std::int64_t kTargetMatricesBf16 = 105728 * 2;                // 211456
// --max-context 2048 --max-seqs 4: 4 x (2048 / 16 + 1) = 516 blocks of 16 tokens; keys and values
// of 2 layers x 2 KV heads x 16 dims in f32.
constexpr std::int64_t kTargetKv = 2 * 2 * 516 * 16 * 2 * 16 * 4;  // 4227072
// The draft model: 250x64 (tied) + 36864 = 52864 weights; norms 2 x 64 + 64 = 192 floats; one layer of cache.
constexpr std::int64_t kDraftModelF32 = 52864 * 4 + 192 * 4;  // 212224
constexpr std::int64_t kDraftModelKv = kTargetKv / 2;         // 2113536

json recipe_json(const json& draft = nullptr) {
    json j = json::parse(read_file(std::string(ANVIL_EXAMPLES_DIR) + "/registry/recipes/anvil-tiny-llama-f32-cpu.json"));
    j["launch"]["model"]["path"] = "/models/target";
    j["launch"]["model"]["dtype"] = "f32";
    j["launch"]["arguments"] = {"--weights", "f32", "--kv-dtype", "f32", "--max-context", "2048", "--max-seqs", "4"};
    if (!draft.is_null()) j["launch"]["draft"] = draft;
    return j;
}

Recipe recipe_of(const json& j) {
    const Document doc = parse_document(j.dump(), Provenance{"test", "", "recipes/r.json", "", ""});
    INFO((doc.errors.empty() ? std::string() : doc.error_lines().front()));
    REQUIRE(doc.valid());
    return *doc.recipe();
}

ModelShapeReading shapes(const ModelRef& m) {
    if (m.path == "/models/target") return parse_model_shape(target_config(), "/models/target/config.json");
    if (m.path == "/models/draft") return parse_model_shape(draft_config(), "/models/draft/config.json");
    return {std::nullopt, m.path + "/config.json: cannot be read"};
}

const MemoryPart& part(const EmbeddedMemory& m, const std::string& what) {
    for (const auto& p : m.parts)
        if (p.what == what) return p;
    FAIL("no part " << what << " in " << m.describe());
    return m.parts.front();
}

EvidenceVariable measured_bytes(std::int64_t bytes, const std::string& source) {
    EvidenceVariable v;
    v.value = Number{bytes};
    v.unit = "bytes";
    v.status = EvidenceStatus::measured;
    v.source = source;
    return v;
}

json draft_model(const std::string& path = "/models/draft") {
    return {{"path", path}, {"digest", "sha256:" + std::string(64, 'e')}, {"dtype", "f32"}, {"licence", "MIT"}};
}

}  // namespace

TEST_CASE("the target's weights and KV cache, by hand", "[feasibility][memory]") {
    const EmbeddedMemory m = estimate_embedded_memory(recipe_of(recipe_json()), shapes);
    INFO(m.describe());
    CHECK(m.unknowns.empty());
    CHECK(part(m, "target weights").bytes == IntInterval::exact(kTargetWeightsF32));
    CHECK(part(m, "target weights").how == "f32, as stored");
    CHECK(part(m, "target KV cache").bytes == IntInterval::exact(kTargetKv));
    CHECK(part(m, "target KV cache").how == "f32, 516 blocks of 16 tokens");
    CHECK(m.parts.size() == 2);
    CHECK(m.total == IntInterval::exact(kTargetWeightsF32 + kTargetKv));

    // The flags that size it: q8 weights (an interval: packed or not), bf16 cache, explicit blocks.
    json j = recipe_json();
    j["launch"]["arguments"] = {"--weights", "q8", "--kv-dtype", "bf16", "--kv-blocks=100"};
    const EmbeddedMemory q8 = estimate_embedded_memory(recipe_of(j), shapes);
    CHECK(part(q8, "target weights").bytes == IntInterval{kTargetMatricesQ8Min + 1280, kTargetMatricesQ8Max + 1280});
    CHECK(part(q8, "target KV cache").bytes == IntInterval::exact(2 * 2 * 100 * 16 * 2 * 16 * 2));
}

TEST_CASE("each draft kind adds what anvil-engine holds for it, and layers and ngram add nothing", "[feasibility][memory][draft]") {
    const IntInterval plain = estimate_embedded_memory(recipe_of(recipe_json()), shapes).total;
    auto added = [&](const json& draft) {
        const EmbeddedMemory m = estimate_embedded_memory(recipe_of(recipe_json(draft)), shapes);
        INFO(m.describe());
        REQUIRE(m.unknowns.empty());
        return m.total - plain;
    };
    // self: the matrices again (the f32 norms are the same mapping of the files), and a cache as large as the target's.
    CHECK(added({{"kind", "self"}, {"weights", "q8"}}) == IntInterval{kTargetMatricesQ8Min + kTargetKv, kTargetMatricesQ8Max + kTargetKv});
    CHECK(added({{"kind", "self"}, {"weights", "bf16"}}) == IntInterval::exact(kTargetMatricesBf16 + kTargetKv));
    // model: its weights as stored (f32) and one layer of cache over the target's blocks.
    CHECK(added({{"kind", "model"}, {"model", draft_model()}}) == IntInterval::exact(kDraftModelF32 + kDraftModelKv));
    // layers and ngram: the target's own weights and cache, or no model at all.
    CHECK(added({{"kind", "layers"}, {"layers", 1}}) == IntInterval::exact(0));
    CHECK(added({{"kind", "ngram"}, {"ngram", 2}}) == IntInterval::exact(0));

    const EmbeddedMemory self = estimate_embedded_memory(recipe_of(recipe_json({{"kind", "self"}, {"weights", "q8"}})), shapes);
    CHECK(part(self, "draft weights").how == "self q8");
    CHECK(part(self, "draft KV cache").how == "f32, 516 blocks of 16 tokens");
    const EmbeddedMemory layers = estimate_embedded_memory(recipe_of(recipe_json({{"kind", "layers"}, {"layers", 1}})), shapes);
    CHECK(part(layers, "draft").how == "early exit: the target's own weights and KV cache");
}

TEST_CASE("a self draft held as the target is held runs on the target's tensors and adds nothing", "[feasibility][memory][draft]") {
    json j = recipe_json({{"kind", "self"}, {"weights", "bf16"}});
    j["launch"]["model"]["dtype"] = "bf16";
    j["launch"]["arguments"] = {"--weights", "stored", "--kv-dtype", "f32", "--max-context", "2048", "--max-seqs", "4"};
    const EmbeddedMemory m = estimate_embedded_memory(recipe_of(j), shapes);
    CHECK(part(m, "target weights").bytes == IntInterval::exact(kTargetMatricesBf16 + 1280));
    CHECK(part(m, "draft weights").bytes == IntInterval::exact(0));
    CHECK(part(m, "draft weights").how == "self bf16, the target's own tensors");
    // q8 from a GGUF Q8_0 file, which is q8 already, and a q8 target's q8 draft.
    j["launch"]["model"]["dtype"] = "q8_0";
    j["launch"]["draft"]["weights"] = "q8";
    CHECK(part(estimate_embedded_memory(recipe_of(j), shapes), "draft weights").bytes == IntInterval::exact(0));
    j["launch"]["model"]["dtype"] = "f32";
    j["launch"]["arguments"] = {"--weights", "q8", "--kv-dtype", "f32", "--max-context", "2048", "--max-seqs", "4"};
    CHECK(part(estimate_embedded_memory(recipe_of(j), shapes), "draft weights").how == "self q8, the target's own tensors");
}

TEST_CASE("an f16 model served as stored is held as f16, as stored", "[feasibility][memory]") {
    json j = recipe_json(nullptr);
    j["launch"]["model"]["dtype"] = "f16";
    j["launch"]["arguments"] = {"--weights", "stored", "--kv-dtype", "f32", "--max-context", "2048", "--max-seqs", "4"};
    const EmbeddedMemory m = estimate_embedded_memory(recipe_of(j), shapes);
    CHECK(part(m, "target weights").bytes == IntInterval::exact(kTargetMatricesBf16 + 1280));  // two bytes a weight
    CHECK(part(m, "target weights").how == "f16, as stored");
}

TEST_CASE("what cannot be sized leaves the total unbounded and says why", "[feasibility][memory]") {
    const EmbeddedMemory no_lookup = estimate_embedded_memory(recipe_of(recipe_json()), nullptr);
    CHECK_FALSE(no_lookup.total.bounded());
    CHECK(no_lookup.unknowns.front() == "target weights: the shape of the model /models/target is unknown: nobody read its config.json");

    const EmbeddedMemory missing = estimate_embedded_memory(recipe_of(recipe_json({{"kind", "model"}, {"model", draft_model("/models/gone")}})), shapes);
    CHECK_FALSE(missing.total.max);
    CHECK(part(missing, "target weights").bytes == IntInterval::exact(kTargetWeightsF32));
    CHECK(missing.unknowns == std::vector<std::string>{
                                  "draft weights: the shape of the draft model /models/gone is unknown: /models/gone/config.json: cannot be read",
                                  "draft KV cache: the shape of the draft model /models/gone is unknown: /models/gone/config.json: cannot be read"});

    json odd = recipe_json();
    odd["launch"]["arguments"] = {"--max-seqs", "four"};
    CHECK(estimate_embedded_memory(recipe_of(odd), shapes).unknowns ==
          std::vector<std::string>{"launch argument --max-seqs four is not a whole number"});
    json bad_config = target_config();
    bad_config.erase("vocab_size");
    CHECK(parse_model_shape(bad_config, "c.json").problem == "c.json: vocab_size is missing");
}

TEST_CASE("the estimate agrees with what anvil-engine allocates for the tiny model", "[feasibility][memory][engine]") {
    anvil::test::TempDir dir;
    const auto model = dir / "tiny";
    const auto made = anvil::test::run({ANVIL_ENGINE, "make-model", "--out", model.string(), "--preset", "tiny", "--seed", "3"});
    REQUIRE(made.exit_code == 0);
    const ModelShapeLookup real = [&](const ModelRef&) { return read_model_shape(model); };
    const anvil::engine::ModelConfig config = anvil::engine::load_config(model);
    json j = recipe_json();
    j["launch"]["arguments"] = {"--kv-dtype", "bf16", "--max-context", "256", "--max-seqs", "2"};
    for (const std::string weights : {"q8", "bf16"}) {
        INFO(weights);
        j["launch"]["draft"] = {{"kind", "self"}, {"weights", weights}};
        const EmbeddedMemory m = estimate_embedded_memory(recipe_of(j), real);
        REQUIRE(m.unknowns.empty());
        // A self draft converts the f32 model's matrices and maps its norms: what it owns is the part.
        const anvil::engine::ModelWeights held(config, model, anvil::engine::parse_weight_format(weights));
        const IntInterval draft = part(m, "draft weights").bytes;
        CHECK(*draft.min <= std::int64_t(held.resident_bytes()));
        CHECK(std::int64_t(held.resident_bytes()) <= *draft.max);
        // Its cache, like the target's: 2 x (256 / 16 + 1) blocks.
        const anvil::engine::KvCache kv(anvil::kernels::KvType::BF16, config.n_layers, 34, 16, config.n_kv_heads, config.head_dim);
        CHECK(part(m, "target KV cache").bytes == IntInterval::exact(std::int64_t(kv.bytes())));
        CHECK(part(m, "draft KV cache").bytes == IntInterval::exact(std::int64_t(kv.bytes())));
    }
}

TEST_CASE("the host_memory gate judges an embedded recipe's estimate against this host's memory", "[gates][memory][draft]") {
    const Recipe with_self = recipe_of(recipe_json({{"kind", "self"}, {"weights", "bf16"}}));
    const std::int64_t need = kTargetWeightsF32 + kTargetKv + kTargetMatricesBf16 + kTargetKv;
    auto host = [](std::int64_t bytes) { return measured_bytes(bytes, "/proc/meminfo MemTotal"); };
    auto gate_of = [](const RecipeAssessment& a) {
        for (const auto& g : a.gates)
            if (g.name == GateName::host_memory) return g;
        FAIL("no host_memory gate");
        return a.gates.front();
    };
    GateContext ctx;
    ctx.policy.commercial = false;
    ctx.model_shapes = shapes;
    const std::string estimate = "the embedded engine needs " + std::to_string(need) +
                                 " bytes, estimated: target weights (f32, as stored) 424192 + target KV cache (f32, 516 blocks "
                                 "of 16 tokens) 4227072 + draft weights (self bf16) 211456 + draft KV cache (f32, 516 blocks of 16 tokens) "
                                 "4227072";
    SECTION("fits: passes") {
        ctx.host_memory = host(need);
        const auto a = assess_recipe(with_self, PinStatus{}, {}, ctx);
        CHECK(gate_of(a).status == AxisStatus::pass);
        CHECK(gate_of(a).reason == estimate + "; this host has " + std::to_string(need) + " bytes (/proc/meminfo MemTotal, measured)");
    }
    SECTION("one byte short: modeled-infeasible, since the demand is a model of the engine") {
        ctx.host_memory = host(need - 1);
        const auto a = assess_recipe(with_self, PinStatus{}, {}, ctx);
        CHECK(gate_of(a).status == AxisStatus::fail);
        CHECK(gate_of(a).reason == estimate + "; more than this host's " + std::to_string(need - 1) + " bytes (/proc/meminfo MemTotal, measured)");
        CHECK(a.verdict == Verdict::modeled_infeasible);
        // Without the draft the same host holds it.
        CHECK(gate_of(assess_recipe(recipe_of(recipe_json()), PinStatus{}, {}, ctx)).status == AxisStatus::pass);
    }
    SECTION("no host memory, or no shapes: unknown, and the recipe unresolved") {
        const auto a = assess_recipe(with_self, PinStatus{}, {}, ctx);
        CHECK(gate_of(a).status == AxisStatus::unknown);
        CHECK(gate_of(a).reason == estimate + "; this host's memory is unknown");
        CHECK(a.verdict == Verdict::unresolved);
        ctx.host_memory = host(need);
        ctx.model_shapes = nullptr;
        CHECK_THAT(gate_of(assess_recipe(with_self, PinStatus{}, {}, ctx)).reason,
                   Catch::StartsWith("the embedded engine's memory is unknown: target weights: the shape of the model /models/target is unknown"));
    }
    SECTION("a recipe for another engine has no host_memory gate") {
        const Document seed = parse_document(anvil::test::seed_text("003_"), Provenance{"seeds", "", "003.json", "", ""});
        const auto a = assess_recipe(*seed.recipe(), seed.pins, models_of(seed), ctx);
        for (const auto& g : a.gates) CHECK(g.name != GateName::host_memory);
    }
}

TEST_CASE("an embedded recipe on a GPU needs its weights and one context of KV cache within the memory fraction of one GPU",
          "[gates][memory]") {
    json j = recipe_json();
    j["hardware_id"] = "nvidia-rtx-pro-6000";
    // One context of 2048 tokens: 2048 / 16 + 1 = 129 blocks, a quarter of the CPU's 516.
    constexpr std::int64_t kOneContextKv = kTargetKv / 516 * 129;  // 1056768
    // The runner's working memory for 256 batch tokens and 4 x 1 + 32 = 36 logits rows: rope tables
    // 2 x 2048 x 8 floats; activations 256 x (3 x 64 + 2 x 64 + 2 x 32 + 2 x 128) floats; logits and
    // final norm 36 x (250 + 64) floats; indices 3 x 256 + 36 + 256 x 128 blocks + 36 argmax ints;
    // cuBLAS's scratch 256 x 128 bf16; 256 MiB of headroom.
    constexpr std::int64_t kWorking = (32768 + 163840 + 11304) * 4 + 33608 * 4 + 65536 + (std::int64_t(256) << 20);  // 269467072
    constexpr std::int64_t need = kTargetWeightsF32 + kOneContextKv + kWorking;
    const EmbeddedMemory m = estimate_embedded_gpu_memory(recipe_of(j), shapes);
    CHECK(m.unknowns.empty());
    CHECK(m.total == IntInterval::exact(need));
    CHECK(part(m, "target KV cache").how == "f32, 129 blocks of 16 tokens");
    // What the GPU runner allocates, by the engine's own account (engine/runner.hpp).
    anvil::engine::ModelConfig config;
    config.dim = 64;
    config.hidden_dim = 128;
    config.n_layers = 2;
    config.n_heads = 4;
    config.n_kv_heads = 2;
    config.head_dim = 16;
    config.vocab_size = 250;
    anvil::engine::RunnerOptions runner;
    runner.max_batch_tokens = 256;
    runner.max_logit_rows = 36;
    runner.max_context = 2048;
    CHECK(part(m, "target working memory").bytes == IntInterval::exact(std::int64_t(anvil::engine::device_working_bytes(config, runner))));
    CHECK(part(m, "target KV cache").bytes ==
          IntInterval::exact(std::int64_t(anvil::engine::device_block_bytes(config, runner)) * 129));
    // A self draft in another format adds its weights, its cache and its runner's working memory
    // (one logits row a sequence); in the target's format it adds no weights.
    j["launch"]["draft"] = {{"kind", "self"}, {"weights", "bf16"}, {"tokens", 4}};
    const EmbeddedMemory drafted = estimate_embedded_gpu_memory(recipe_of(j), shapes);
    runner.max_logit_rows = 4;
    CHECK(part(drafted, "draft working memory").bytes == IntInterval::exact(std::int64_t(anvil::engine::device_working_bytes(config, runner))));
    runner.max_logit_rows = 4 * 5 + 32;
    CHECK(part(drafted, "target working memory").bytes == IntInterval::exact(std::int64_t(anvil::engine::device_working_bytes(config, runner))));
    CHECK(part(drafted, "draft KV cache").bytes == IntInterval::exact(kOneContextKv));
    j["launch"].erase("draft");

    auto measured = [](std::int64_t bytes) { return measured_bytes(bytes, "test"); };
    Inventory inventory;  // what ctx.inventory points at
    auto gpus = [&](std::int64_t bytes) {
        inventory.source = "test";
        Gpu gpu;
        gpu.uuid = "GPU-0";
        gpu.total_bytes = measured(bytes);
        gpu.idle_used_bytes = measured(0);
        inventory.gpus = {gpu, gpu};
        return &inventory;
    };
    auto gate_of = [](const RecipeAssessment& a, GateName name) {
        for (const auto& g : a.gates)
            if (g.name == name) return g;
        FAIL("no " << to_string(name) << " gate");
        return a.gates.front();
    };
    GateContext ctx;
    ctx.policy.commercial = false;
    ctx.model_shapes = shapes;
    ctx.host_memory = measured(kTargetWeightsF32);  // the weights alone: the cache is on the GPU
    // 0.9 of a GPU: need / 0.9 = 301053368.9 bytes.
    ctx.inventory = gpus(301053369);
    auto a = assess_recipe(recipe_of(j), PinStatus{}, {}, ctx);
    CHECK(gate_of(a, GateName::engine_gpu_memory).status == AxisStatus::pass);
    CHECK(gate_of(a, GateName::engine_gpu_memory).reason ==
          "the embedded engine needs " + std::to_string(need) +
              " bytes of one GPU, estimated: target weights (f32, as stored) 424192 + target KV cache (f32, 129 blocks of 16 "
              "tokens) 1056768 + target working memory (256 batch tokens, 36 logits rows, 2048 positions, 256 MiB headroom) "
              "269467072; it may take 0.9 of it: 2 of 2 GPUs surely hold it");
    CHECK(gate_of(a, GateName::host_memory).status == AxisStatus::pass);
    CHECK_THAT(gate_of(a, GateName::host_memory).reason,
               Catch::StartsWith("the embedded engine needs 424192 bytes here (its KV cache is on the GPU)"));

    ctx.inventory = gpus(301053368);
    a = assess_recipe(recipe_of(j), PinStatus{}, {}, ctx);
    CHECK(gate_of(a, GateName::engine_gpu_memory).status == AxisStatus::fail);
    CHECK(a.verdict == Verdict::modeled_infeasible);  // a model of the engine, never a proof

    // A smaller share needs a larger GPU; a share that is no fraction leaves the gate unknown.
    j["launch"]["arguments"].push_back("--gpu-memory-utilization");
    j["launch"]["arguments"].push_back("0.5");
    ctx.inventory = gpus(2 * need);
    CHECK(gate_of(assess_recipe(recipe_of(j), PinStatus{}, {}, ctx), GateName::engine_gpu_memory).status == AxisStatus::pass);
    ctx.inventory = gpus(2 * need - 1);
    CHECK(gate_of(assess_recipe(recipe_of(j), PinStatus{}, {}, ctx), GateName::engine_gpu_memory).status == AxisStatus::fail);
    j["launch"]["arguments"].back() = "1.5";
    const Gate odd = gate_of(assess_recipe(recipe_of(j), PinStatus{}, {}, ctx), GateName::engine_gpu_memory);
    CHECK(odd.status == AxisStatus::unknown);
    CHECK_THAT(odd.reason, Catch::Contains("--gpu-memory-utilization is not a fraction"));

    // On the CPU there is no such gate.
    for (const auto& g : assess_recipe(recipe_of(recipe_json()), PinStatus{}, {}, ctx).gates) CHECK(g.name != GateName::engine_gpu_memory);
}

TEST_CASE("this host's memory is MemTotal of /proc/meminfo, measured", "[gates][memory]") {
    CHECK(meminfo_total_bytes("MemTotal:       16302140 kB\nMemFree:         1000 kB\n") == std::int64_t(16302140) * 1024);
    CHECK_FALSE(meminfo_total_bytes("MemFree: 1000 kB\n"));
    CHECK_FALSE(meminfo_total_bytes("MemTotal: lots\n"));
    const auto here = measure_host_memory();
    REQUIRE(here);
    CHECK(here->status == EvidenceStatus::measured);
    CHECK(std::get<std::int64_t>(*here->value) > 0);
    anvil::test::TempDir dir;
    CHECK_FALSE(measure_host_memory((dir / "absent").string()));
}

TEST_CASE("`anvil feasibility` judges an embedded recipe's host memory with its models under --model-root", "[gates][memory][cli]") {
    anvil::test::TempDir dir;
    const auto made = anvil::test::run({ANVIL_ENGINE, "make-model", "--out", (dir / "models" / "tiny").string(), "--preset", "tiny"});
    REQUIRE(made.exit_code == 0);
    json j = recipe_json({{"kind", "self"}, {"weights", "q8"}});
    j["launch"]["model"]["path"] = "${MODEL_ROOT}/tiny";
    anvil::test::write_file(dir / "recipe.json", j.dump());
    auto judge = [&](std::vector<std::string> extra) {
        std::vector<std::string> argv{ANVIL_CLI, "feasibility", (dir / "recipe.json").string(), "--format", "json", "--commercial", "no"};
        argv.insert(argv.end(), extra.begin(), extra.end());
        const auto r = anvil::test::run(argv);
        INFO(r.output);
        REQUIRE(r.exit_code == 0);
        return json::parse(r.output.substr(r.output.find('{')));
    };
    const json report = judge({"--model-root", (dir / "models").string()});
    CHECK(report["host_memory"]["status"] == "measured");
    const json gate = report["recipes"][0]["gates"]["host_memory"];
    INFO(gate.dump());
    CHECK(gate["status"] == "pass");
    CHECK_THAT(gate["reason"].get<std::string>(), Catch::Contains("+ draft weights (self q8) [") &&
                                                      Catch::Contains("+ draft KV cache (f32, 516 blocks of 16 tokens) "));
    // Unresolved only for the context, which no requirement here states.
    for (const auto& reason : report["recipes"][0]["reasons"]) CHECK_FALSE(reason.get<std::string>().starts_with("host_memory"));

    const json unknown = judge({})["recipes"][0];
    CHECK(unknown["gates"]["host_memory"]["status"] == "unknown");
    CHECK_THAT(unknown["gates"]["host_memory"]["reason"].get<std::string>(),
               Catch::Contains("${MODEL_ROOT}/tiny is under ${MODEL_ROOT}: give --model-root DIR"));
    CHECK(unknown["class"] == "unresolved");
    bool says_why = false;
    for (const auto& reason : unknown["reasons"]) says_why = says_why || reason.get<std::string>().starts_with("host_memory: ");
    CHECK(says_why);
}

TEST_CASE("without --max-context the cache follows the model's own context length, within 4 GiB", "[feasibility][memory]") {
    json j = recipe_json();
    j["launch"]["arguments"] = {"--weights", "f32"};
    auto shape_with = [](std::int64_t positions) {
        return [positions](const ModelRef& m) {
            json c = target_config();
            c["max_position_embeddings"] = positions;
            return parse_model_shape(c, m.path + "/config.json");
        };
    };
    // 512 positions: 4 sequences x (512 / 16 + 1) = 132 blocks.
    const EmbeddedMemory short_context = estimate_embedded_memory(recipe_of(j), shape_with(512));
    CHECK(part(short_context, "target KV cache").how == "f32, 132 blocks of 16 tokens");
    CHECK(part(short_context, "target KV cache").bytes == IntInterval::exact(2 * 2 * 132 * 16 * 2 * 16 * 4));
    // 131072 positions would need 4 x 8193 blocks of 8 KiB; the engine stops at 4 GiB (524288
    // blocks of this shape), more than one whole context: all four fit here.
    const EmbeddedMemory long_context = estimate_embedded_memory(recipe_of(j), shape_with(131072));
    CHECK(part(long_context, "target KV cache").how == "f32, 32772 blocks of 16 tokens");
    // 2^30 positions would need 512 GiB a sequence: the context is what 4 GiB holds for one
    // (524287 blocks), and the pool is those 4 GiB.
    const EmbeddedMemory huge_context = estimate_embedded_memory(recipe_of(j), shape_with(1 << 30));
    CHECK(part(huge_context, "target KV cache").how == "f32, 524288 blocks of 16 tokens");
    CHECK(part(huge_context, "target KV cache").bytes == IntInterval::exact(std::int64_t(4) << 30));
    // A GGUF file's Q8_0 tensors are held as the engine's q8.
    j["launch"]["arguments"] = {"--max-context", "2048"};
    j["launch"]["model"]["dtype"] = "q8_0";
    const EmbeddedMemory q8_0 = estimate_embedded_memory(recipe_of(j), shapes);
    CHECK(part(q8_0, "target weights").bytes == IntInterval{kTargetMatricesQ8Min + 1280, kTargetMatricesQ8Max + 1280});
    CHECK(part(q8_0, "target weights").how == "q8");
    // Rows of 64 and 128 values are not whole super-blocks: llama-quantize's fallbacks for them,
    // Q5_0 and Q8_0, are both held as q8.
    j["launch"]["model"]["dtype"] = "q4_k_m";
    const EmbeddedMemory q4_k_m = estimate_embedded_memory(recipe_of(j), shapes);
    CHECK(part(q4_k_m, "target weights").bytes == IntInterval{kTargetMatricesQ8Min + 1280, kTargetMatricesQ8Max + 1280});
    CHECK(part(q4_k_m, "target weights").how == "q4_k_m");  // the blocks are packed: copies of their own
    j["launch"]["model"]["dtype"] = "q6_k";
    CHECK(part(estimate_embedded_memory(recipe_of(j), shapes), "target weights").bytes ==
          IntInterval{kTargetMatricesQ8Min + 1280, kTargetMatricesQ8Max + 1280});
    j["launch"]["model"]["dtype"] = "q5_k";
    CHECK_THAT(estimate_embedded_memory(recipe_of(j), shapes).unknowns.at(0),
               Catch::Contains("does not serve as stored (f32, bf16, f16, q8_0, q4_0, q4_k_m, q6_k)"));
}
