// Hardening of what a registry author controls (issue 16): a document nested 100,000 levels deep,
// bytes that are not UTF-8, oversized documents and ids, loader variables in an engine's
// environment, and model paths or mounts outside the allowed roots. Each is refused with one clear
// line naming the file and the JSON pointer, on paper, and none of them stops anything else: the
// other documents are read, the daemon keeps answering, `anvil registry check` says the same.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "daemon/config/config.hpp"
#include "daemon/drivers/launch_resolution.hpp"
#include "registry/catalog.hpp"
#include "registry/catalog_report.hpp"
#include "registry/document.hpp"
#include "registry/engine_environment.hpp"
#include "registry/owned_flags.hpp"
#include "registry/json_text_check.hpp"
#include "support/utf8.hpp"
#include "daemon_fixture.hpp"
#include "test_support.hpp"

using namespace anvil::registry;
using anvil::support::first_invalid_utf8;
using anvil::support::is_valid_utf8;
using anvil::support::to_valid_utf8;
namespace fs = std::filesystem;
using anvil::test::all_errors;

namespace {

const std::string kDigest = "sha256:" + std::string(64, 'a');

json anvil_recipe(const std::string& id, const std::string& model_path = "${MODEL_ROOT}/tiny") {
    return {{"schema_version", "anvil.recipe/v1"},
            {"id", id},
            {"recipe_source", "test"},
            {"status", "candidate"},
            {"model_instance_id", "tiny"},
            {"hardware_id", "cpu"},
            {"hardware_count", 1},
            {"engine", {{"name", "anvil-engine"}, {"version", "0.1.0"}}},
            {"launch",
             {{"kind", "embedded"},
              {"model", {{"path", model_path}, {"digest", kDigest}, {"dtype", "f32"}, {"licence", "MIT"}}},
              {"arguments", {"--weights", "f32"}},
              {"environment", json::object()}}},
            {"serving", {{"max_context_tokens", 512}, {"max_concurrency", 1}, {"tensor_parallel", 1}}},
            {"capabilities", {{"chat", true}, {"reasoning", false}, {"tools", false}, {"vision", false}}}};
}

// `{"x": [[[…]]]}` spliced into a recipe's text: the unknown field nests `levels` arrays, so the
// document as a whole nests levels + 1 (the record itself is the first level).
std::string with_deep_field(const json& recipe, std::size_t levels) {
    std::string text = recipe.dump();
    text.pop_back();  // the closing brace
    text += ", \"x\": " + std::string(levels, '[') + std::string(levels, ']') + "}";
    return text;
}

Document parse(std::string_view text, const std::string& path = "recipes/doc.json", DocumentLimits limits = {}) {
    return parse_document(text, Provenance{"test", "", path, "", ""}, limits);
}

// Launches placed under dir/models (${MODEL_ROOT}), on 100 ports from `first`.
anvil::drivers::LaunchConfig models_config(const anvil::test::TempDir& dir, int first) {
    anvil::drivers::LaunchConfig config;
    config.placeholders = {{"MODEL_ROOT", (dir / "models").string()}};
    config.allowed_roots = {dir / "models"};
    config.port_first = first;
    config.port_last = first + 99;
    return config;
}

std::string repeat(const std::string& token, std::size_t times) {
    std::string out;
    for (std::size_t i = 0; i < times; ++i) out += token;
    return out;
}

// What `dump()` does to a report: strict, so any byte that is not UTF-8 throws.
bool dumps_strictly(const json& j) {
    try {
        (void)j.dump();
        return true;
    } catch (const json::type_error&) {
        return false;
    }
}

}  // namespace

// ---- nesting depth -------------------------------------------------------------------------------

TEST_CASE("a document nested 100,000 levels deep is invalid, naming where the limit was passed, without recursing", "[hardening][registry][depth]") {
    const auto doc = parse(with_deep_field(anvil_recipe("deep"), 100000));
    REQUIRE_FALSE(doc.valid());
    REQUIRE(doc.errors.size() == 1);
    // The record is level 1 and x's arrays levels 2 on: the 65th level is x's 64th array, at /x/0/…/0.
    CHECK(doc.errors[0].pointer == "/x" + repeat("/0", kMaxNestingDepth - 1));
    CHECK(doc.errors[0].expected == "at most 64 levels of nested objects and arrays");
    CHECK_THAT(doc.errors[0].found, Catch::Contains("an array at level 65") && Catch::Contains("line 1, column"));
    CHECK_THAT(all_errors(doc), Catch::StartsWith("recipes/doc.json: at /x/0/0/"));
    CHECK(doc.raw.is_null());  // nothing deep was built, so nothing deep is dumped or destroyed
}

TEST_CASE("nesting up to the limit is read: one level more is refused", "[hardening][registry][depth]") {
    const auto at_limit = parse(with_deep_field(anvil_recipe("at-limit"), kMaxNestingDepth - 1));
    INFO(all_errors(at_limit));
    CHECK(at_limit.valid());
    CHECK(at_limit.to_json().dump().size() > 100);  // the unknown field is kept and round-trips
    const auto beyond = parse(with_deep_field(anvil_recipe("beyond"), kMaxNestingDepth));
    CHECK_FALSE(beyond.valid());
}

TEST_CASE("the depth pointer names object keys as RFC 6901 escapes them, inside an envelope too", "[hardening][registry][depth]") {
    std::string deep = "{\"data\": {\"a/b~c\": {\"k\\u0065y\": [1, " + std::string(100, '[') + std::string(100, ']') + "]}}}";
    const auto doc = parse(deep);
    REQUIRE(doc.errors.size() == 1);
    // The record, data, a/b~c and key's array are four levels; key's second element opens the fifth.
    CHECK(doc.errors[0].pointer == "/data/a~1b~0c/key/1" + repeat("/0", kMaxNestingDepth - 4));
}

TEST_CASE("deep objects are refused as deep arrays are, and brackets inside strings do not count", "[hardening][registry][depth]") {
    std::string objects;
    for (int i = 0; i < 1000; ++i) objects += "{\"o\": ";
    objects += "1" + std::string(1000, '}');
    const auto doc = parse(objects);
    REQUIRE(doc.errors.size() == 1);
    CHECK(doc.errors[0].pointer == repeat("/o", kMaxNestingDepth));
    CHECK_THAT(doc.errors[0].found, Catch::Contains("an object at level 65"));

    json shallow = anvil_recipe("brackets-in-strings");
    shallow["description"] = std::string(5000, '[') + "\"" + std::string(5000, '{');
    CHECK(parse(shallow.dump()).valid());
}

// ---- UTF-8 ---------------------------------------------------------------------------------------

TEST_CASE("UTF-8 is checked by the rules of RFC 3629", "[hardening][registry][utf8]") {
    CHECK(is_valid_utf8("plain ascii"));
    CHECK(is_valid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));  // é € 😀
    CHECK(first_invalid_utf8("ok\xFF") == 2);
    CHECK_FALSE(is_valid_utf8("\xC0\x80"));          // overlong NUL
    CHECK_FALSE(is_valid_utf8("\xE0\x80\xAF"));      // overlong '/'
    CHECK_FALSE(is_valid_utf8("\xED\xA0\x80"));      // a surrogate
    CHECK_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // beyond U+10FFFF
    CHECK_FALSE(is_valid_utf8("\xE2\x82"));          // cut short
    CHECK_FALSE(is_valid_utf8("\x80"));              // a stray continuation byte
    CHECK(to_valid_utf8("a\xFF" "b\xE2\x82") == "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD");
    CHECK(to_valid_utf8("caf\xC3\xA9") == "caf\xC3\xA9");
}

TEST_CASE("a byte that is not UTF-8 makes the document invalid, naming the field and the byte", "[hardening][registry][utf8]") {
    std::string text = anvil_recipe("bad-bytes").dump();
    text.insert(text.find("\"test\"") + 3, "\xFF");  // inside recipe_source's value
    const auto doc = parse(text);
    REQUIRE(doc.errors.size() == 1);
    CHECK(doc.errors[0].pointer == "/recipe_source");
    CHECK(doc.errors[0].expected == "valid UTF-8");
    CHECK_THAT(doc.errors[0].found, Catch::Contains("0xFF") && Catch::Contains("line 1, column"));
    CHECK(is_valid_utf8(all_errors(doc)));

    // In a key: the object that holds it. Outside any string: where the scan is.
    CHECK(parse("{\"launch\": {\"k\xC3\": 1}}").errors.at(0).pointer == "/launch");
    const auto outside = parse("{\"launch\": [1, \xFE]}");
    CHECK(outside.errors.at(0).pointer == "/launch/1");
    CHECK(outside.errors.at(0).expected == "valid UTF-8");
}

TEST_CASE("every error line and report stays UTF-8, whatever the parser quotes or the file is named", "[hardening][registry][utf8]") {
    // Valid UTF-8 where JSON allows no text: the parser's message quotes the first byte of é alone.
    const auto syntax = parse("{\"a\": \xC3\xA9}");
    REQUIRE_FALSE(syntax.valid());
    CHECK(is_valid_utf8(all_errors(syntax)));

    // A git tree may name a file with any bytes.
    const auto named = parse(anvil_recipe("named").dump(), "recipes/na\xFFme.json");
    REQUIRE_FALSE(named.valid());
    CHECK(named.provenance.path == "recipes/na\xEF\xBF\xBDme.json");
    CHECK(named.errors.at(0).expected == "a file name of valid UTF-8 (rename the file)");

    // A long value cut for a message is cut between characters.
    CHECK(is_valid_utf8(render_short(json(std::string(79, 'a') + "\xC3\xA9\xC3\xA9"))));
    FieldError quoted{"/p\xFF", "x\xFF", "y\xFF"};
    CHECK(is_valid_utf8(format_error("f\xFF.json", quoted)));

    anvil::test::TempDir dir;
    anvil::test::write_file(dir / "bad.json", "{\"schema_version\": \"anvil.recipe/v1\", \"id\": \"x\xFF\"}");
    anvil::test::write_file(dir / "syntax.json", "{\"a\": \xC3\xA9}");
    const auto catalog = Catalog::from_filesystem(dir.path());
    CHECK(catalog.size() == 2);
    CHECK(dumps_strictly(catalog_report(catalog, "dir\xFF", "ref")));
}

// ---- size and id limits ---------------------------------------------------------------------------

TEST_CASE("a document over the size limit is invalid before it is parsed: the default is 1 MiB", "[hardening][registry][limits]") {
    CHECK(DocumentLimits{}.max_document_bytes == 1024 * 1024);
    json recipe = anvil_recipe("big");
    recipe["description"] = std::string(1024 * 1024, 'x');
    const auto big = parse(recipe.dump());
    REQUIRE(big.errors.size() == 1);
    CHECK(big.errors[0].pointer.empty());
    CHECK_THAT(big.errors[0].expected, Catch::Contains("at most 1048576 bytes") && Catch::Contains("max_document_bytes"));
    CHECK(big.errors[0].found == std::to_string(recipe.dump().size()) + " bytes");
    CHECK(big.raw.is_null());  // never parsed
    CHECK_FALSE(big.provenance.sha256.empty());

    // Not parsed at all: even text that is no JSON gets only the size error.
    const auto junk = parse(std::string(2000, '{'), "x.json", DocumentLimits{1000});
    REQUIRE(junk.errors.size() == 1);
    CHECK_THAT(junk.errors[0].expected, Catch::Contains("at most 1000 bytes"));

    const std::string text = anvil_recipe("fits").dump();
    CHECK(parse(text, "x.json", DocumentLimits{text.size()}).valid());
    CHECK_FALSE(parse(text, "x.json", DocumentLimits{text.size() - 1}).valid());
}

TEST_CASE("an id over 128 characters is invalid at /id and claims nothing", "[hardening][registry][limits]") {
    const std::string longest(kMaxIdLength, 'a');
    CHECK(parse(anvil_recipe(longest).dump()).valid());
    const auto doc = parse(anvil_recipe(longest + "a").dump());
    REQUIRE(doc.errors.size() == 1);
    CHECK(doc.errors[0].pointer == "/id");
    CHECK(doc.errors[0].expected == "an id of at most 128 characters");
    CHECK(doc.errors[0].found == "an id of 129 characters");
    CHECK(doc.id.empty());

    // Inside an envelope, the pointer is the file's.
    const auto wrapped = parse(json{{"data", anvil_recipe(std::string(200, 'b'))}, {"meta", json::object()}}.dump());
    CHECK(wrapped.errors.at(0).pointer == "/data/id");
}

TEST_CASE("max_document_bytes is a daemon configuration key, 1 MiB unless set, given to every source", "[hardening][registry][limits][config]") {
    using anvil::daemon::parse_config;
    const auto defaults = parse_config(R"({"sources": [{"url": "/srv/registry"}]})", "/etc/anvil/anvild.json");
    CHECK(defaults.max_document_bytes == 1024 * 1024);
    CHECK(defaults.sources.at(0).document_limits.max_document_bytes == 1024 * 1024);
    const auto set = parse_config(R"({"sources": [{"url": "/a"}, {"url": "/b"}], "max_document_bytes": 65536})", "/etc/anvil/anvild.json");
    CHECK(set.max_document_bytes == 65536);
    for (const auto& source : set.sources) CHECK(source.document_limits.max_document_bytes == 65536);
    for (const char* bad : {R"({"max_document_bytes": 0})", R"({"max_document_bytes": "1MiB"})", R"({"max_document_bytes": -5})"})
        CHECK_THROWS_WITH(parse_config(bad, "/etc/anvil/anvild.json"), Catch::Contains("/max_document_bytes: expected a positive integer"));
}

// ---- loader variables ------------------------------------------------------------------------------

TEST_CASE("an engine's environment: an allowlist for anvil-engine, code-loading variables refused on the host, loader ones everywhere", "[hardening][registry][environment]") {
    using P = EnvironmentPolicy;
    // name, embedded (anvil-engine), host process (native), container: true where refused.
    const struct {
        const char* name;
        bool embedded, host, container;
    } table[] = {
        {"LD_PRELOAD", true, true, true},
        {"LD_LIBRARY_PATH", true, true, true},
        {"LD_AUDIT", true, true, true},
        {"GCONV_PATH", true, true, true},
        {"GLIBC_TUNABLES", true, true, true},
        {"LOCPATH", true, true, true},
        {"NLSPATH", true, true, true},
        {"MALLOC_TRACE", true, true, true},
        {"HOSTALIASES", true, true, true},
        {"BASH_ENV", true, true, true},
        {"ENV", true, true, true},
        {"A=B", true, true, true},
        {"", true, true, true},
        // the engine's key is anvil's to make
        {"ANVIL_ENGINE_API_KEY", true, true, true},
        {"VLLM_API_KEY", true, true, true},
        {"LLAMA_API_KEY", true, true, true},
        // the engine's own plugin and helpers, the GPU stack's injection and plugin variables
        {"ANVIL_ENGINE_CUDA_PLUGIN", true, true, false},
        {"ANVIL_NVML_LIBRARY", true, true, false},
        {"ANVIL_COLLECTIVE_PROBE", true, true, false},
        {"CUDA_INJECTION64_PATH", true, true, false},
        {"NVTX_INJECTION64_PATH", true, true, false},
        {"CUDA_CACHE_PATH", true, true, false},
        {"NCCL_NET_PLUGIN", true, true, false},
        {"NCCL_TUNER_PLUGIN", true, true, false},
        {"NCCL_CONF_FILE", true, true, false},
        {"OMP_TOOL_LIBRARIES", true, true, false},
        {"PYTHONPATH", true, true, false},
        {"PYTHONSTARTUP", true, true, false},
        {"PYTHONUSERBASE", true, true, false},
        {"NODE_OPTIONS", true, true, false},
        {"TRITON_CACHE_DIR", true, true, false},
        {"TORCH_EXTENSIONS_DIR", true, true, false},
        {"PATH", true, true, false},
        {"HOME", true, true, false},
        {"CUDA_VISIBLE_DEVICES", true, true, false},
        // what anvil-engine documents as safe
        {"ANVIL_LOG", false, false, false},
        {"ANVIL_KERNELS", false, false, false},
        {"OMP_NUM_THREADS", false, false, false},
        {"OMP_WAIT_POLICY", false, false, false},
        {"GOMP_SPINCOUNT", false, false, false},
        // ordinary variables other engines read
        {"HF_HOME", true, true, false},
        {"NCCL_P2P_LEVEL", true, false, false},
        {"PYTHONUNBUFFERED", true, false, false},
        {"VLLM_ATTENTION_BACKEND", true, false, false},
        {"TMPDIR", true, true, false},
        {"OPENSSL_CONF", true, true, false},
        {"XDG_CACHE_HOME", true, true, false},
        {"PYTHONWARNINGS", true, true, false},
        {"BROWSER", true, true, false},
        {"LLAMA_ARG_MODEL", true, true, false},
        {"LLAMA_ARG_CTX_SIZE", true, true, false},
        {"PLD_X", true, false, false},
    };
    for (const auto& row : table) {
        INFO(row.name);
        CHECK(refused_environment_variable(row.name, P::engine_allowlist).has_value() == row.embedded);
        CHECK(refused_environment_variable(row.name, P::host_process).has_value() == row.host);
        CHECK(refused_environment_variable(row.name, P::container).has_value() == row.container);
    }
    CHECK(environment_policy("embedded") == P::engine_allowlist);
    CHECK(environment_policy("native") == P::host_process);
    CHECK(environment_policy("script") == P::host_process);
    CHECK(environment_policy("docker") == P::container);
    CHECK_THAT(*refused_environment_variable("HF_HOME", P::engine_allowlist),
               Catch::Contains("ANVIL_LOG, ANVIL_KERNELS, OMP_NUM_THREADS, OMP_WAIT_POLICY, GOMP_SPINCOUNT"));
}

TEST_CASE("an embedded recipe that sets ANVIL_ENGINE_CUDA_PLUGIN is refused on paper and at launch", "[hardening][registry][environment]") {
    json r = anvil_recipe("plugin");
    r["launch"]["environment"] = {{"ANVIL_ENGINE_CUDA_PLUGIN", "/tmp/evil.so"}};
    r["launch"]["arguments"] = {"--weights", "f32"};
    const auto doc = parse(r.dump());
    REQUIRE(doc.valid());
    REQUIRE(doc.warnings.size() == 1);
    CHECK_THAT(doc.warnings[0], Catch::StartsWith("anvild refuses this recipe: launch.environment at /launch/environment/ANVIL_ENGINE_CUDA_PLUGIN") &&
                                    Catch::Contains("is not one that anvil-engine takes from a recipe"));
    anvil::test::TempDir dir;
    const auto config = models_config(dir, 23400);
    CHECK_THAT(*anvil::drivers::paper_refusal(*doc.recipe(), config), Catch::Contains("/launch/environment/ANVIL_ENGINE_CUDA_PLUGIN"));
    CHECK_THROWS_WITH(anvil::drivers::resolve_launch(*doc.recipe(), config), Catch::Contains("/launch/environment/ANVIL_ENGINE_CUDA_PLUGIN"));
}

TEST_CASE("a recipe that sets LD_PRELOAD is refused on paper and at launch, and registry check warns", "[hardening][registry][environment]") {
    json r = anvil_recipe("preload");
    r["launch"]["environment"] = {{"OMP_NUM_THREADS", "4"}, {"LD_PRELOAD", "/tmp/evil.so"}};
    const auto doc = parse(r.dump());
    REQUIRE(doc.valid());  // the registry's schema allows it; anvild's policy does not
    REQUIRE(doc.warnings.size() == 1);
    CHECK_THAT(doc.warnings[0], Catch::StartsWith("anvild refuses this recipe: launch.environment at /launch/environment/LD_PRELOAD"));

    anvil::test::TempDir dir;
    const auto config = models_config(dir, 23400);
    const auto refusal = anvil::drivers::paper_refusal(*doc.recipe(), config);
    REQUIRE(refusal);
    CHECK_THAT(*refusal, Catch::Contains("recipe preload") && Catch::Contains("/launch/environment/LD_PRELOAD") &&
                             Catch::Contains("dynamic-loader variable"));
    CHECK_THROWS_WITH(anvil::drivers::resolve_launch(*doc.recipe(), config), Catch::Contains("/launch/environment/LD_PRELOAD"));

    r["launch"]["environment"] = {{"OMP_NUM_THREADS", "4"}};
    const auto clean = parse(r.dump());
    CHECK(clean.warnings.empty());
    CHECK_FALSE(anvil::drivers::paper_refusal(*clean.recipe(), config));
}

// ---- flags the driver owns ------------------------------------------------------------------------

namespace {

// The first warning of `recipe` once parsed, or "" when it has none.
std::string refusal_of(const json& recipe) {
    const auto doc = parse(recipe.dump());
    INFO(all_errors(doc));
    REQUIRE(doc.valid());
    return doc.warnings.empty() ? "" : doc.warnings.front();
}

json with_arguments(json recipe, std::vector<std::string> arguments) {
    recipe["launch"]["arguments"] = std::move(arguments);
    return recipe;
}

json native_recipe(const std::string& engine, std::vector<std::string> arguments) {
    json r = anvil_recipe("native-" + engine);
    r["engine"]["name"] = engine;
    r["launch"]["kind"] = "native";
    r["launch"]["arguments"] = std::move(arguments);
    return r;
}

}  // namespace

TEST_CASE("a recipe's arguments may not name a flag the driver owns, in any spelling", "[hardening][registry][flags]") {
    const json embedded = anvil_recipe("owned");
    CHECK(refusal_of(embedded).empty());
    for (const char* flag : {"--model", "--host", "--port", "--served-model-name", "--api-key", "--device", "--draft-model", "--draft-layers"}) {
        INFO(flag);
        const std::string spaced = refusal_of(with_arguments(embedded, {"--weights", "f32", flag, "/elsewhere"}));
        CHECK_THAT(spaced, Catch::Contains("launch.arguments at /launch/arguments/2: " + std::string(flag) + " is a flag anvil gives anvil-engine itself"));
        const std::string joined = refusal_of(with_arguments(embedded, {std::string(flag) + "=/elsewhere", "--weights", "f32"}));
        CHECK_THAT(joined, Catch::Contains("/launch/arguments/0: " + std::string(flag) + " is"));
    }
    CHECK_THAT(refusal_of(with_arguments(embedded, {"--model", "/elsewhere", "--model", "/again"})), Catch::Contains("/launch/arguments/0"));
    CHECK_THAT(refusal_of(with_arguments(embedded, {"--model", "/x"})), Catch::EndsWith("give the model in /launch/model (pinned, inside an allowed root)"));
    CHECK_THAT(refusal_of(with_arguments(embedded, {"--served-model-name", "x"})), Catch::EndsWith("name it in /serving/served_model_name"));
    // Look-alikes are the recipe's own.
    CHECK(refusal_of(with_arguments(embedded, {"--models-dir", "x", "--portal", "--max-context", "512"})).empty());

    // Native launches of the engines anvil knows by name: their model, host and port flags.
    CHECK_THAT(refusal_of(native_recipe("vllm", {"vllm", "serve", "/elsewhere", "--dtype", "auto"})),
               Catch::Contains("/launch/arguments/2: '/elsewhere' after 'serve' names the model"));
    CHECK_THAT(refusal_of(native_recipe("vllm", {"vllm", "serve", "--model=/elsewhere"})), Catch::Contains("/launch/arguments/2: --model is a flag anvil gives vLLM"));
    // argparse's spellings: underscores for dashes, and unambiguous prefixes.
    CHECK_THAT(refusal_of(native_recipe("vllm", {"vllm", "serve", "--api_key=known"})), Catch::Contains("/launch/arguments/2: --api-key is"));
    CHECK_THAT(refusal_of(native_recipe("vllm", {"vllm", "serve", "--mod", "/elsewhere"})), Catch::Contains("/launch/arguments/2: --model is"));
    CHECK_THAT(refusal_of(native_recipe("sglang", {"python3", "-m", "sglang.launch_server", "--model_path=/m"})), Catch::Contains("--model-path is"));
    CHECK(refusal_of(native_recipe("vllm", {"vllm", "serve", "--max-model-len", "4096", "--dtype", "auto"})).empty());
    CHECK_THAT(refusal_of(native_recipe("sglang", {"python3", "-m", "sglang.launch_server", "--model-path", "/m"})),
               Catch::Contains("/launch/arguments/3: --model-path"));
    CHECK_THAT(refusal_of(native_recipe("llama.cpp", {"llama-server", "-m", "/m.gguf"})), Catch::Contains("/launch/arguments/1: -m is"));
    CHECK_THAT(refusal_of(native_recipe("llama.cpp", {"llama-server", "--port=8080"})), Catch::Contains("--port is a flag anvil gives llama.cpp's server"));
    // A native launch of an engine nobody names, or a container (its own image and network namespace), is not judged here.
    CHECK(refusal_of(native_recipe("my-engine", {"/opt/engine", "--model", "/m"})).find("launch.arguments") == std::string::npos);
    json container = anvil_recipe("container");
    container["engine"]["name"] = "vllm";
    container["launch"] = {{"kind", "docker"},
                           {"image", "vllm/vllm-openai@sha256:" + std::string(64, 'b')},
                           {"arguments", {"serve", "/model", "--host", "0.0.0.0", "--port", "8000"}},
                           {"environment", json::object()},
                           {"container_port", 8000}};
    CHECK(refusal_of(container).find("launch.arguments") == std::string::npos);
}

TEST_CASE("a native launch of a known engine gets anvil's model, host and port after its own arguments", "[hardening][registry][flags][driver]") {
    anvil::test::TempDir dir;
    fs::create_directories(dir / "models/tiny");
    const auto config = models_config(dir, 23420);
    const auto doc = parse(native_recipe("vllm", {"vllm", "serve", "--dtype", "auto"}).dump());
    REQUIRE(doc.valid());
    // vLLM's model is the word after `serve` (it wins over --model there): anvil puts it there.
    const auto launch = anvil::drivers::resolve_launch(*doc.recipe(), config);
    CHECK(launch.arguments == std::vector<std::string>{"vllm", "serve", fs::canonical(dir / "models/tiny").string(), "--dtype", "auto",
                                                       "--host", "127.0.0.1", "--port", std::to_string(launch.port)});
    const auto sglang = parse(native_recipe("sglang", {"python3", "-m", "sglang.launch_server"}).dump());
    const auto sglang_launch = anvil::drivers::resolve_launch(*sglang.recipe(), config);
    CHECK(sglang_launch.arguments == std::vector<std::string>{"python3", "-m", "sglang.launch_server", "--model-path",
                                                              fs::canonical(dir / "models/tiny").string(), "--host", "127.0.0.1", "--port",
                                                              std::to_string(sglang_launch.port)});
    // The owned flag in the recipe stops the launch as it stops the paper judgement.
    const auto owned = parse(native_recipe("vllm", {"vllm", "serve", "--port", "1"}).dump());
    CHECK_THROWS_WITH(anvil::drivers::resolve_launch(*owned.recipe(), config), Catch::Contains("/launch/arguments/2: --port"));
    json no_model = native_recipe("vllm", {"vllm", "serve"});
    no_model["launch"].erase("model");
    CHECK_THAT(refusal_of(no_model), Catch::Contains("/launch/model: a native vLLM launch gets its model from anvil"));
}

// ---- allowed roots ---------------------------------------------------------------------------------

TEST_CASE("model paths and mount sources outside the allowed roots are refused on paper, each root named once", "[hardening][registry][roots]") {
    anvil::test::TempDir dir;
    fs::create_directories(dir / "models/tiny");
    fs::create_directories(dir / "cache");
    anvil::drivers::LaunchConfig config;
    config.placeholders = {{"MODEL_ROOT", (dir / "models").string()}, {"CACHE_ROOT", (dir / "cache").string()}};
    // model_root listed again in allowed_mount_roots, once with a trailing slash: still one root.
    config.allowed_roots = {dir / "models", dir / "cache", dir / "models", fs::path((dir / "models").string() + "/")};

    const auto inside = parse(anvil_recipe("inside").dump());
    CHECK_FALSE(anvil::drivers::paper_refusal(*inside.recipe(), config));

    const auto outside = parse(anvil_recipe("outside", (dir / "elsewhere/tiny").string()).dump());
    const auto why = anvil::drivers::paper_refusal(*outside.recipe(), config);
    REQUIRE(why);
    CHECK_THAT(*why, Catch::Contains("recipe outside at /launch/model/path") && Catch::Contains("outside the allowed roots (" +
                                                                                                  (dir / "models").string() + ", " +
                                                                                                  (dir / "cache").string() + ")"));
    CHECK(why->find('\n') == std::string::npos);

    json mounted = anvil_recipe("mounted");
    mounted["launch"]["mounts"] = {{{"source", "/etc"}, {"target", "/data"}, {"read_only", true}}};
    const auto mount_doc = parse(mounted.dump());
    REQUIRE(mount_doc.valid());
    const auto mount_why = anvil::drivers::paper_refusal(*mount_doc.recipe(), config);
    REQUIRE(mount_why);
    CHECK_THAT(*mount_why, Catch::Contains("/launch/mounts/0/source") && Catch::Contains("outside the allowed roots"));
}

// ---- anvil registry check says what ingest says ------------------------------------------------------

TEST_CASE("anvil registry check reports the deep, non-UTF-8, oversized and long-id documents as ingest does", "[hardening][registry][cli]") {
    anvil::test::TempDir tmp;
    anvil::test::GitRepo repo(tmp / "registry");
    repo.write("recipes/good.json", anvil_recipe("good").dump(2));
    repo.write("recipes/deep.json", with_deep_field(anvil_recipe("deep"), 100000));
    std::string bad_bytes = anvil_recipe("bad-bytes").dump();
    bad_bytes.insert(bad_bytes.find("\"test\"") + 3, "\xFF");
    repo.write("recipes/bad-bytes.json", bad_bytes);
    repo.write("recipes/long-id.json", anvil_recipe(std::string(129, 'l')).dump());
    json preload = anvil_recipe("preload");
    preload["launch"]["environment"] = {{"LD_PRELOAD", "/tmp/evil.so"}};
    repo.write("recipes/preload.json", preload.dump());
    repo.write("recipes/elsewhere.json", with_arguments(anvil_recipe("elsewhere"), {"--model=/elsewhere"}).dump());
    repo.commit("hostile recipes");
    const std::string data = "--data-dir=" + (tmp / "data").string();

    auto table = anvil::test::run({ANVIL_CLI, "registry", "check", repo.dir().string(), data});
    INFO(table.output);
    CHECK(table.exit_code == 1);
    CHECK_THAT(table.output, Catch::Contains("recipes/deep.json: at /x/0/0/") && Catch::Contains("expected at most 64 levels"));
    CHECK_THAT(table.output, Catch::Contains("recipes/bad-bytes.json: at /recipe_source: expected valid UTF-8, found the byte 0xFF"));
    CHECK_THAT(table.output, Catch::Contains("recipes/long-id.json: at /id: expected an id of at most 128 characters"));
    CHECK_THAT(table.output, Catch::Contains("preload  recipe  ") && Catch::Contains("anvild refuses this recipe") &&
                                 Catch::Contains("LD_PRELOAD"));
    CHECK_THAT(table.output, Catch::Contains("elsewhere  recipe  ") && Catch::Contains("/launch/arguments/0: --model is a flag anvil gives"));
    CHECK_THAT(table.output, Catch::Contains("6 documents") && Catch::Contains("3 invalid"));

    // The same lines ingest produces, from the same parse.
    const std::string deep_line = parse(with_deep_field(anvil_recipe("deep"), 100000), "recipes/deep.json").error_lines().at(0);
    CHECK_THAT(table.output, Catch::Contains(deep_line));

    auto report = anvil::test::run({ANVIL_CLI, "registry", "check", repo.dir().string(), data, "--format", "json"});
    CHECK(report.exit_code == 1);
    const json j = json::parse(report.output);  // strict: would throw on invalid UTF-8
    CHECK(j["summary"]["invalid"] == 3);

    auto limited = anvil::test::run({ANVIL_CLI, "registry", "check", repo.dir().string(), data, "--max-document-bytes", "100"});
    CHECK_THAT(limited.output, Catch::Contains("recipes/good.json: at /: expected a document of at most 100 bytes"));
    CHECK_THAT(limited.output, Catch::Contains("6 invalid"));
    auto bad_option = anvil::test::run({ANVIL_CLI, "registry", "check", repo.dir().string(), data, "--max-document-bytes", "lots"});
    CHECK(bad_option.exit_code == 2);
    CHECK_THAT(bad_option.output, Catch::Contains("--max-document-bytes must be a positive whole number"));
}

// ---- against a real anvild on a real git registry ------------------------------------------------

#ifdef ANVILD

TEST_CASE("anvild survives a hostile registry commit: deep, non-UTF-8 and LD_PRELOAD recipes, paths outside the roots, restarts", "[hardening][registry][daemon][e2e]") {
    using namespace anvil::test::daemon;
    Daemon d;
    // model_root is also listed in allowed_mount_roots: a refusal must still name it once.
    json config = json::parse(anvil::test::read_file(d.dir / "anvild.json"));
    const std::string models = (d.dir / "models").string();
    config["allowed_mount_roots"] = {models, models + "/"};
    anvil::test::write_file(d.dir / "anvild.json", config.dump(2));

    d.repo.write("recipes/tiny-f32.json", embedded_recipe("tiny-f32", "f32", d.digest));
    json deep = json::parse(embedded_recipe("deep", "f32", d.digest));
    d.repo.write("recipes/deep.json", with_deep_field(deep, 100000));
    std::string bad_bytes = embedded_recipe("bad-bytes", "f32", d.digest);
    bad_bytes.insert(bad_bytes.find("\"test recipe") + 3, "\xFF\xFE");
    d.repo.write("recipes/bad-bytes.json", bad_bytes);
    d.repo.write("recipes/bad-name-\xFF.json", embedded_recipe("bad-name", "f32", d.digest));
    json preload = json::parse(embedded_recipe("preload", "f32", d.digest));
    preload["launch"]["environment"] = {{"LD_PRELOAD", (d.dir / "evil.so").string()}};
    d.repo.write("recipes/preload.json", preload.dump(2));
    json outside = json::parse(embedded_recipe("outside", "f32", d.digest));
    outside["launch"]["model"]["path"] = (d.dir / "elsewhere" / "tiny").string();
    d.repo.write("recipes/outside.json", outside.dump(2));
    // The probe's N3 and N4: a plugin the engine would dlopen, and a second --model that the engine
    // would have kept over the driver's (a real model, outside the roots, unpinned).
    json plugin = json::parse(embedded_recipe("plugin", "f32", d.digest));
    plugin["launch"]["environment"] = {{"ANVIL_ENGINE_CUDA_PLUGIN", (d.dir / "evil.so").string()}};
    plugin["launch"]["arguments"].push_back("--device");
    plugin["launch"]["arguments"].push_back("cuda:0");
    d.repo.write("recipes/plugin.json", plugin.dump(2));
    json second_model = json::parse(embedded_recipe("second-model", "f32", d.digest));
    second_model["launch"]["arguments"].push_back("--model");
    second_model["launch"]["arguments"].push_back((d.dir / "elsewhere" / "tiny").string());
    d.repo.write("recipes/second-model.json", second_model.dump(2));
    json joined_model = json::parse(embedded_recipe("joined-model", "f32", d.digest));
    joined_model["launch"]["arguments"].push_back("--model=" + (d.dir / "elsewhere" / "tiny").string());
    d.repo.write("recipes/joined-model.json", joined_model.dump(2));
    d.repo.commit("hostile recipes beside a good one");

    for (int run = 0; run < 2; ++run) {  // the second run is the restart that used to crash again
        INFO("run " << run);
        d.start();
        // The good recipe of the same commit is ingested and judged.
        REQUIRE(eventually([&] { return !d.status_of("tiny-f32").empty() && d.status_of("tiny-f32") != "rejected"; }, 60s));

        auto [code, registry] = d.get("/api/v1/registry");
        REQUIRE(code == 200);
        std::map<std::string, std::string> problems;
        for (const auto& invalid : registry["data"][0]["invalid"]) problems[invalid["path"]] = invalid["problems"].dump();
        CHECK(problems.size() == 3);
        CHECK_THAT(problems["recipes/deep.json"], Catch::Contains("recipes/deep.json: at /x/0/0/0") && Catch::Contains("at most 64 levels"));
        CHECK_THAT(problems["recipes/bad-bytes.json"], Catch::Contains("at /description: expected valid UTF-8"));
        CHECK_THAT(problems["recipes/bad-name-\xEF\xBF\xBD.json"], Catch::Contains("a file name of valid UTF-8"));
        CHECK(d.get("/api/v1/recipes/deep").first == 404);

        // Refused on paper, before any engine: loader variables, and a model outside the roots.
        REQUIRE(eventually([&] { return d.status_of("preload") == "rejected" && d.status_of("outside") == "rejected"; }, 30s));
        const auto preload_history = d.get("/api/v1/recipes/preload/history").second["data"];
        CHECK_THAT(preload_history.back()["reason"].get<std::string>(),
                   Catch::Contains("refused on paper") && Catch::Contains("/launch/environment/LD_PRELOAD"));
        for (const auto& t : preload_history) CHECK(t["to"] != "qualifying");
        const std::string outside_reason = d.get("/api/v1/recipes/outside/history").second["data"].back()["reason"].get<std::string>();
        CHECK_THAT(outside_reason, Catch::Contains("/launch/model/path") && Catch::Contains("outside the allowed roots (" + models + ")"));
        CHECK(outside_reason.find(models) == outside_reason.rfind(models));  // named once
        REQUIRE(eventually([&] {
            return d.status_of("plugin") == "rejected" && d.status_of("second-model") == "rejected" && d.status_of("joined-model") == "rejected";
        }, 30s));
        for (const auto& [id, says] : std::map<std::string, std::string>{{"plugin", "/launch/environment/ANVIL_ENGINE_CUDA_PLUGIN"},
                                                                           {"second-model", "/launch/arguments/"},
                                                                           {"joined-model", "--model is a flag anvil gives anvil-engine"}}) {
            INFO(id);
            const auto history = d.get("/api/v1/recipes/" + id + "/history").second["data"];
            CHECK_THAT(history.back()["reason"].get<std::string>(), Catch::Contains("refused on paper") && Catch::Contains(says));
            for (const auto& t : history) CHECK(t["to"] != "qualifying");
        }

        d.stop();
    }
}

#endif  // ANVILD
