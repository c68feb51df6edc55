// What the web console reads, against a real anvild: its files (built into the binary, with their
// security headers and ETags), the decisions view (the same rules as promotion), receipts checked
// against the ledger's sha256, engine log tails, sorted recipe pages and the feed's newest items.
// The pages themselves are tested in a real browser (tests/browser/console_test.mjs).
#include "daemon_fixture.hpp"

#ifdef ANVILD

using namespace anvil::test::daemon;

namespace {

// f32 becomes the first default; q8 is measured against it and, with a gain nobody can reach,
// stays validated beside it.
void start_with_a_candidate_held_back(Daemon& d) {
    json config = json::parse(anvil::test::read_file(d.dir / "anvild.json"));
    config["requirements"]["thresholds"]["min_warm_e2e_gain"] = {
        {"value", 0.99}, {"unit", "ratio"}, {"status", "assumed"}, {"source", "test: no candidate beats the default"}, {"observed_at", "2026-12-02"}};
    anvil::test::write_file(d.dir / "anvild.json", config.dump(2));
    d.repo.write("recipes/tiny-f32.json", embedded_recipe("tiny-f32", "f32", d.digest));
    d.repo.write("recipes/tiny-q8.json", embedded_recipe("tiny-q8", "q8", d.digest));
    d.repo.commit("two recipes");
    d.start();
    REQUIRE(eventually([&] { return d.status_of("tiny-f32") == "promoted" && d.status_of("tiny-q8") == "validated" && d.serving() == "tiny-f32"; }, 120s));
}

httplib::Result raw_get(const Daemon& d, const std::string& path, const httplib::Headers& headers = {}) {
    httplib::Client c("127.0.0.1", d.api_port);
    return c.Get(path.c_str(), headers);
}

}  // namespace

TEST_CASE("the console's files are served from anvild itself, with a content security policy and ETags", "[daemon][console]") {
    Daemon d;
    d.repo.write("README.md", "an empty registry\n");
    d.repo.commit("empty");
    d.start();
    auto page = raw_get(d, "/");
    REQUIRE(page);
    CHECK(page->status == 200);
    CHECK_THAT(page->get_header_value("Content-Type"), Catch::StartsWith("text/html"));
    CHECK_THAT(page->body, Catch::Contains("/console/console.js"));
    CHECK_THAT(page->get_header_value("Content-Security-Policy"), Catch::Contains("script-src 'self'"));
    CHECK_THAT(page->get_header_value("Content-Security-Policy"), Catch::Contains("frame-ancestors 'none'"));
    CHECK(page->get_header_value("X-Content-Type-Options") == "nosniff");
    const std::string etag = page->get_header_value("ETag");
    REQUIRE(etag.size() == 66);  // a quoted sha256

    auto again = raw_get(d, "/", {{"If-None-Match", etag}});
    REQUIRE(again);
    CHECK(again->status == 304);
    CHECK(again->body.empty());

    auto chart = raw_get(d, "/console/vendor/chart.umd.min.js");
    REQUIRE(chart);
    CHECK(chart->status == 200);
    CHECK_THAT(chart->get_header_value("Content-Type"), Catch::StartsWith("text/javascript"));
    CHECK(chart->body.size() > 100000);  // Chart.js itself, not a placeholder
    auto licence = raw_get(d, "/console/vendor/chart.js-LICENSE.md");
    REQUIRE(licence);
    CHECK_THAT(licence->body, Catch::Contains("MIT"));

    auto missing = raw_get(d, "/console/../anvild.json");
    REQUIRE(missing);
    CHECK(missing->status == 404);
    CHECK(json::parse(missing->body)["error"]["code"] == "not_found");

    // Invalid UTF-8 and oversized ids in the new routes: a JSON error that parses, and anvild goes on.
    for (const auto& [path, status] : std::vector<std::pair<std::string, int>>{
             {"/console/%FF%FE.js", 404}, {"/api/v1/recipes?sort=%FF", 400}, {"/api/v1/recipes/%FF%C0/receipts", 404},
             {"/api/v1/engines/1234567890123456789012/log", 404}, {"/api/v1/engines/1/log?lines=%FF", 400}, {"/api/v1/events?last=%FF", 400}}) {
        auto r = raw_get(d, path);
        REQUIRE(r);
        INFO(path);
        CHECK(r->status == status);
        const json body = json::parse(r->body, nullptr, false);
        REQUIRE_FALSE(body.is_discarded());
        CHECK(body["error"]["message"].is_string());
    }
    CHECK(d.get("/healthz").first == 200);
    d.stop();
}

TEST_CASE("the decisions view shows each candidate's numbers against the default, decided by promotion's own rules", "[daemon][console][e2e]") {
    Daemon d;
    start_with_a_candidate_held_back(d);
    const json view = d.get("/api/v1/decisions").second["data"];
    const json t = view["thresholds"];
    CHECK(t["min_warm_e2e_gain"] == 0.99);
    CHECK(t["limits"]["warm_e2e_gain_at_least"].get<double>() == Approx(0.99 + t["margin"].get<double>()));
    CHECK(t["limits"]["relative_quality_loss_at_most"].get<double>() == Approx(t["max_relative_quality_loss"].get<double>() - t["margin"].get<double>()));

    const json control = view["control"];
    CHECK(control["recipe_id"] == "tiny-f32");
    CHECK_THAT(control["promoted"]["reason"].get<std::string>(), Catch::StartsWith("first default"));

    REQUIRE(view["candidates"].size() == 1);
    const json q8 = view["candidates"][0];
    CHECK(q8["recipe_id"] == "tiny-q8");
    CHECK(q8["measured_against_default"] == true);
    const double gain = 1 - q8["metrics"]["warm_e2e_seconds"].get<double>() / control["metrics"]["warm_e2e_seconds"].get<double>();
    CHECK(q8["comparison"]["warm_e2e_gain"].get<double>() == Approx(gain));
    CHECK(q8["comparison"]["relative_quality_loss"] == q8["metrics"]["relative_quality_loss"]);
    CHECK(q8["decision"]["action"] == "pass_over");
    CHECK_THAT(q8["decision"]["reason"].get<std::string>(), Catch::Contains("warm e2e gain"));
    CHECK(q8["chosen"] == false);
    // The pass decided the same: the Promotion condition and the choice say why it holds.
    CHECK(view["choice"]["condition"] == "Holding");
    CHECK_THAT(view["choice"]["reason"].get<std::string>(), Catch::Contains("tiny-q8: " + q8["decision"]["reason"].get<std::string>()));

    // GET /api/v1/default says why the default is the default.
    const json def = d.get("/api/v1/default").second["data"];
    CHECK(def["reason"] == control["promoted"]["reason"]);
    CHECK(def["actor"] == "reconciler");

    // A pin decides now; each candidate's own comparison is still shown.
    REQUIRE(d.post("/api/v1/default", R"({"recipe_id": "tiny-q8"})").first == 200);
    REQUIRE(eventually([&] { return d.serving() == "tiny-q8"; }, 60s));
    const json pinned = d.get("/api/v1/decisions").second["data"];
    CHECK(pinned["policy"]["pinned"] == "tiny-q8");
    CHECK(pinned["choice"]["condition"] == "Pinned");
    CHECK(pinned["control"]["recipe_id"] == "tiny-q8");
    CHECK_THAT(pinned["control"]["promoted"]["reason"].get<std::string>(), Catch::StartsWith("pinned as the default by api:"));
    d.stop();
    check_ledger(d);
}

TEST_CASE("receipts are checked against the ledger's sha256, engine logs are tailed, pages sort, the feed gives its newest items", "[daemon][console][e2e]") {
    Daemon d;
    start_with_a_candidate_held_back(d);

    // ---- receipts
    auto [code, body] = d.get("/api/v1/recipes/tiny-q8/receipts");
    REQUIRE(code == 200);
    REQUIRE(body["data"]["receipts"].size() == 1);
    json receipt = body["data"]["receipts"][0];
    CHECK(receipt["verified"] == true);
    CHECK(receipt["error"].is_null());
    CHECK(receipt["hard_gates_passed"] == true);
    CHECK(receipt["gates"].size() >= 3);
    CHECK(receipt["control"]["recipe_id"] == "tiny-f32");
    CHECK(receipt["control"]["measurements"].contains("warm_e2e_seconds"));
    CHECK_FALSE(receipt.contains("exchanges"));  // the request log stays in the file
    CHECK(body["data"]["thresholds"]["min_warm_e2e_gain"] == 0.99);
    // A receipt changed on disk no longer matches what the ledger recorded, and says so.
    fs::path file;
    for (const auto& e : fs::directory_iterator(d.dir / "data" / "receipts"))
        if (e.path().filename() == receipt["file"].get<std::string>()) file = e.path();
    REQUIRE_FALSE(file.empty());
    anvil::test::write_file(file, anvil::test::read_file(file) + " ");
    receipt = d.get("/api/v1/recipes/tiny-q8/receipts").second["data"]["receipts"][0];
    CHECK(receipt["verified"] == false);
    CHECK_THAT(receipt["error"].get<std::string>(), Catch::Contains("has changed since it was recorded"));
    CHECK(d.get("/api/v1/recipes/nope/receipts").first == 404);

    // ---- engine logs
    const json engines = d.get("/api/v1/engines").second["data"];
    REQUIRE(engines.size() == 1);
    const auto id = engines[0]["id"].get<std::int64_t>();
    auto [log_code, log] = d.get("/api/v1/engines/" + std::to_string(id) + "/log?lines=5");
    REQUIRE(log_code == 200);
    const std::string text = log["data"]["text"];
    CHECK_FALSE(text.empty());
    CHECK(std::count(text.begin(), text.end(), '\n') <= 5);
    CHECK(d.get("/api/v1/engines/999999/log").first == 404);
    CHECK(d.get("/api/v1/engines/" + std::to_string(id) + "/log?lines=0").first == 400);

    // ---- sorting
    auto ids = [&](const std::string& query) {
        std::vector<std::string> out;
        const json page = d.get("/api/v1/recipes?" + query).second;
        for (const auto& r : page["data"]) out.push_back(r["id"]);
        return out;
    };
    CHECK(ids("sort=id") == std::vector<std::string>{"tiny-f32", "tiny-q8"});
    CHECK(ids("sort=-id") == std::vector<std::string>{"tiny-q8", "tiny-f32"});
    CHECK(ids("sort=-status") == std::vector<std::string>{"tiny-q8", "tiny-f32"});  // validated after promoted
    CHECK(ids("sort=status&limit=1&offset=1") == std::vector<std::string>{"tiny-q8"});
    const json bad = d.get("/api/v1/recipes?sort=size").second;
    CHECK_THAT(bad["error"]["message"].get<std::string>(), Catch::Contains("sort must be one of id, status, engine, hardware, verdict"));
    CHECK(d.get("/api/v1/recipes?sort=-status").second["links"]["self"] == "/api/v1/recipes?limit=50&offset=0&sort=-status");

    // ---- the feed's newest items, and its cursor to follow
    const json all = d.get("/api/v1/events?limit=1000").second;
    const json last = d.get("/api/v1/events?last=3").second;
    REQUIRE(last["data"].size() == 3);
    const auto n = all["data"].size();
    for (std::size_t i = 0; i < 3; ++i) CHECK(last["data"][i]["message"] == all["data"][n - 3 + i]["message"]);
    CHECK(last["meta"]["next"] == all["meta"]["next"]);
    CHECK(d.get("/api/v1/events?after=" + last["meta"]["next"].get<std::string>()).second["data"].empty());
    CHECK(d.get("/api/v1/events?last=3&after=1.1").first == 400);
    d.stop();
}

#endif  // ANVILD
