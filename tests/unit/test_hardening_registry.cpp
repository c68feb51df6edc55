// Hardening of what a registry author controls (issue 16): a document nested 100,000 levels deep,
// bytes that are not UTF-8, oversized documents and ids, loader variables in an engine's
// environment, and model paths or mounts outside the allowed roots. Each is refused with one clear
// line naming the file and the JSON pointer, on paper, and none of them stops anything else: the
// other documents are read, the daemon keeps answering, `anvil registry check` says the same.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "daemon/anvild/config.hpp"
#include "engine/supervisor/launch_resolution.hpp"
#include "registry/catalog.hpp"
#include "registry/catalog_report.hpp"
#include "registry/document.hpp"
#include "registry/engine_environment.hpp"
#include "registry/json_text_check.hpp"
#include "registry/utf8.hpp"
#include "daemon_fixture.hpp"
#include "test_support.hpp"

using namespace anvil::registry;
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

TEST_CASE("loader and libc variables are refused in an engine's environment: ordinary ones are not", "[hardening][registry][environment]") {
    for (const char* name : {"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "LD_DEBUG_OUTPUT", "GCONV_PATH", "GLIBC_TUNABLES", "LOCPATH",
                             "NLSPATH", "MALLOC_TRACE", "HOSTALIASES", "BASH_ENV", "ENV", "A=B", ""}) {
        INFO(name);
        CHECK(refused_environment_variable(name));
    }
    for (const char* name : {"HF_HOME", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "NCCL_P2P_LEVEL", "TMPDIR", "GOMP_SPINCOUNT", "PLD_X"}) {
        INFO(name);
        CHECK_FALSE(refused_environment_variable(name));
    }
}

TEST_CASE("a recipe that sets LD_PRELOAD is refused on paper and at launch, and registry check warns", "[hardening][registry][environment]") {
    json r = anvil_recipe("preload");
    r["launch"]["environment"] = {{"OMP_NUM_THREADS", "4"}, {"LD_PRELOAD", "/tmp/evil.so"}};
    const auto doc = parse(r.dump());
    REQUIRE(doc.valid());  // the registry's schema allows it; anvild's policy does not
    REQUIRE(doc.warnings.size() == 1);
    CHECK_THAT(doc.warnings[0], Catch::StartsWith("anvild refuses this recipe: launch.environment at /launch/environment/LD_PRELOAD"));

    anvil::test::TempDir dir;
    anvil::driver::LaunchConfig config;
    config.placeholders = {{"MODEL_ROOT", (dir / "models").string()}};
    config.allowed_roots = {dir / "models"};
    config.port_first = 23400;
    config.port_last = 23499;
    const auto refusal = anvil::driver::paper_refusal(*doc.recipe(), config);
    REQUIRE(refusal);
    CHECK_THAT(*refusal, Catch::Contains("recipe preload") && Catch::Contains("/launch/environment/LD_PRELOAD") &&
                             Catch::Contains("dynamic-loader variable"));
    CHECK_THROWS_WITH(anvil::driver::resolve_launch(*doc.recipe(), config), Catch::Contains("/launch/environment/LD_PRELOAD"));

    r["launch"]["environment"] = {{"OMP_NUM_THREADS", "4"}};
    const auto clean = parse(r.dump());
    CHECK(clean.warnings.empty());
    CHECK_FALSE(anvil::driver::paper_refusal(*clean.recipe(), config));
}

// ---- allowed roots ---------------------------------------------------------------------------------

TEST_CASE("model paths and mount sources outside the allowed roots are refused on paper, each root named once", "[hardening][registry][roots]") {
    anvil::test::TempDir dir;
    fs::create_directories(dir / "models/tiny");
    fs::create_directories(dir / "cache");
    anvil::driver::LaunchConfig config;
    config.placeholders = {{"MODEL_ROOT", (dir / "models").string()}, {"CACHE_ROOT", (dir / "cache").string()}};
    // model_root listed again in allowed_mount_roots, once with a trailing slash: still one root.
    config.allowed_roots = {dir / "models", dir / "cache", dir / "models", fs::path((dir / "models").string() + "/")};

    const auto inside = parse(anvil_recipe("inside").dump());
    CHECK_FALSE(anvil::driver::paper_refusal(*inside.recipe(), config));

    const auto outside = parse(anvil_recipe("outside", (dir / "elsewhere/tiny").string()).dump());
    const auto why = anvil::driver::paper_refusal(*outside.recipe(), config);
    REQUIRE(why);
    CHECK_THAT(*why, Catch::Contains("recipe outside at /launch/model/path") && Catch::Contains("outside the allowed roots (" +
                                                                                                  (dir / "models").string() + ", " +
                                                                                                  (dir / "cache").string() + ")"));
    CHECK(why->find('\n') == std::string::npos);

    json mounted = anvil_recipe("mounted");
    mounted["launch"]["mounts"] = {{{"source", "/etc"}, {"target", "/data"}, {"read_only", true}}};
    const auto mount_doc = parse(mounted.dump());
    REQUIRE(mount_doc.valid());
    const auto mount_why = anvil::driver::paper_refusal(*mount_doc.recipe(), config);
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
    CHECK_THAT(table.output, Catch::Contains("5 documents") && Catch::Contains("3 invalid"));

    // The same lines ingest produces, from the same parse.
    const std::string deep_line = parse(with_deep_field(anvil_recipe("deep"), 100000), "recipes/deep.json").error_lines().at(0);
    CHECK_THAT(table.output, Catch::Contains(deep_line));

    auto report = anvil::test::run({ANVIL_CLI, "registry", "check", repo.dir().string(), data, "--format", "json"});
    CHECK(report.exit_code == 1);
    const json j = json::parse(report.output);  // strict: would throw on invalid UTF-8
    CHECK(j["summary"]["invalid"] == 3);

    auto limited = anvil::test::run({ANVIL_CLI, "registry", "check", repo.dir().string(), data, "--max-document-bytes", "100"});
    CHECK_THAT(limited.output, Catch::Contains("recipes/good.json: at /: expected a document of at most 100 bytes"));
    CHECK_THAT(limited.output, Catch::Contains("5 invalid"));
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

        d.stop();
    }
}

#endif  // ANVILD
