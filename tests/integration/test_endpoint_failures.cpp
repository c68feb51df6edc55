// The stable endpoint when there is nothing good to forward to: no upstream (503, Retry-After), a
// hung engine (stopped with SIGSTOP: 504) and a dead one (killed: 502), all as OpenAI-style JSON.
#include <catch2/catch.hpp>

#include "test_endpoint_engines.hpp"

using namespace anvil::test::endpoint;
using anvil::endpoint::EndpointOptions;
using anvil::endpoint::StableEndpoint;

TEST_CASE("with no upstream the endpoint answers 503 with Retry-After, and 200 once one is set", "[endpoint]") {
    StableEndpoint endpoint(EndpointOptions{});
    endpoint.start();
    HttpClient through(endpoint.port());
    CHECK_FALSE(endpoint.current());

    for (const bool stream : {false, true}) {
        const Reply r = through.post("/v1/completions", completion("Hello", 2, {{"stream", stream}}));
        CHECK(r.status == 503);
        CHECK(r.header("Retry-After") == "1");
        CHECK(r.parsed()["error"]["code"] == "no_upstream");
    }
    CHECK(through.get("/v1/models").status == 503);
    CHECK(through.get("/healthz").status == 503);
    CHECK(endpoint.stats().no_upstream == 3);

    endpoint.switch_to(engine_a().upstream());
    REQUIRE(endpoint.current());
    CHECK(endpoint.current()->engine_id == "engine-small-f32");
    CHECK(through.get("/healthz").status == 200);
    CHECK(through.post("/v1/completions", completion("Hello", 2)).status == 200);

    // Taking the upstream away again: 503 at once; the switch had nothing in flight to wait for.
    const auto result = endpoint.switch_to(std::nullopt);
    CHECK(result.still_running == 0);
    CHECK(through.post("/v1/completions", completion("Hello", 2)).status == 503);
    CHECK(endpoint.stats().switches == 2);
}

TEST_CASE("a hung engine is a 504 and a dead one a 502", "[endpoint]") {
    EngineProcess engine("small-doomed", "q8", 2);
    EndpointOptions options;
    options.upstream_timeout = std::chrono::milliseconds(600);
    StableEndpoint endpoint(options);
    endpoint.start();
    endpoint.switch_to(engine.upstream());
    HttpClient through(endpoint.port());
    REQUIRE(through.post("/v1/completions", completion("Hello", 2)).status == 200);

    // Stopped, the engine's kernel still accepts connections but nothing answers.
    engine.signal(SIGSTOP);
    for (const bool stream : {false, true}) {
        const auto started = std::chrono::steady_clock::now();
        const Reply hung = through.post("/v1/completions", completion("Hello", 2, {{"stream", stream}}));
        INFO(hung.body);
        CHECK(hung.status == 504);
        CHECK(hung.parsed()["error"]["code"] == "upstream_timeout");
        CHECK(hung.header("x-anvil-engine") == "engine-small-doomed");
        CHECK(std::chrono::steady_clock::now() - started >= std::chrono::milliseconds(500));
    }
    engine.signal(SIGCONT);

    engine.kill();
    for (const bool stream : {false, true}) {
        const Reply dead = through.post("/v1/completions", completion("Hello", 2, {{"stream", stream}}));
        INFO(dead.body);
        CHECK(dead.status == 502);
        CHECK(dead.parsed()["error"]["code"] == "upstream_unreachable");
        CHECK(dead.parsed()["error"]["type"] == "server_error");
    }
    const auto stats = endpoint.stats();
    CHECK(stats.upstream_errors == 4);
    CHECK(stats.in_flight == 0);
}
