// The stable endpoint in front of a real anvil-engine process: completions, chat and SSE streams
// relayed unchanged (compared with asking the engine directly), streams relayed as they are
// produced, the model alias and rewrite, OpenAI-style errors, and upstream errors passed through.
#include <catch2/catch.hpp>

#include "test_endpoint_engines.hpp"

using namespace anvil::test::endpoint;
using anvil::endpoint::EndpointOptions;
using anvil::endpoint::StableEndpoint;

namespace {

struct ForwardingFixture {
    ForwardingFixture() : endpoint(EndpointOptions{}) {
        endpoint.start();
        endpoint.switch_to(engine_a().upstream());
    }
    StableEndpoint endpoint;
};

}  // namespace

TEST_CASE("the endpoint relays completions, chat and streams exactly as the engine answers them", "[endpoint]") {
    ForwardingFixture f;
    HttpClient direct(engine_a().port());
    HttpClient through(f.endpoint.port());
    const std::string model = engine_a().name();

    const json plain = completion("The quick brown fox", 12);
    const Reply d = direct.post("/v1/completions", plain);
    const Reply e = through.post("/v1/completions", plain);
    REQUIRE(d.status == 200);
    INFO(e.body);
    REQUIRE(e.status == 200);
    CHECK(text_of(e) == text_of(d));
    CHECK(e.parsed()["model"] == model);  // the engine answered: no model was given, the endpoint added it
    CHECK(e.header("x-anvil-engine") == "engine-small-f32");
    CHECK(e.header("x-anvil-recipe") == "recipe-small-f32");
    CHECK(e.header("Content-Type").find("application/json") == 0);

    const json chat = {{"messages", {{{"role", "user"}, {"content", "Say something"}}}}, {"max_tokens", 10}, {"temperature", 0}};
    const Reply dc = direct.post("/v1/chat/completions", chat);
    const Reply ec = through.post("/v1/chat/completions", chat);
    REQUIRE(dc.status == 200);
    REQUIRE(ec.status == 200);
    CHECK(text_of(ec) == text_of(dc));
    CHECK(ec.parsed()["object"] == "chat.completion");

    // Streams: the same events' text, complete with [DONE], for completions and chat.
    const json streamed = completion("Once upon a time", 16, {{"stream", true}});
    const Reply ds = direct.post("/v1/completions", streamed);
    const Reply es = through.post("/v1/completions", streamed);
    REQUIRE(es.status == 200);
    CHECK(es.header("Content-Type").find("text/event-stream") == 0);
    CHECK(stream_complete(es));
    CHECK(text_of(es) == text_of(ds));
    CHECK(text_of(es) == text_of(direct.post("/v1/completions", completion("Once upon a time", 16))));
    json chat_stream = chat;
    chat_stream["stream"] = true;
    const Reply ecs = through.post("/v1/chat/completions", chat_stream);
    REQUIRE(ecs.status == 200);
    CHECK(stream_complete(ecs));
    CHECK(text_of(ecs) == text_of(dc));
    CHECK(ecs.header("x-anvil-engine") == "engine-small-f32");

    const auto stats = f.endpoint.stats();
    CHECK(stats.requests == 4);
    CHECK(stats.upstream_errors == 0);
    CHECK(stats.in_flight == 0);
}

TEST_CASE("a stream reaches the client event by event while the engine produces it", "[endpoint]") {
    ForwardingFixture f;
    httplib::Client client("127.0.0.1", f.endpoint.port());
    client.set_read_timeout(60, 0);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = completion("Far away", 128, {{"stream", true}, {"ignore_eos", true}}).dump();
    req.headers.emplace("Content-Type", "application/json");
    using Clock = std::chrono::steady_clock;
    std::vector<Clock::time_point> arrivals;
    std::string body;
    req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
        arrivals.push_back(Clock::now());
        body.append(data, size);
        return true;
    };
    httplib::Response res;
    httplib::Error error = httplib::Error::Success;
    REQUIRE(client.send(req, res, error));
    REQUIRE(res.status == 200);
    CHECK(body.find("data: [DONE]") != std::string::npos);
    // 128 tokens, one SSE event each, decoded one after another: a proxy that buffered to the end
    // would deliver them as one piece at one instant.
    INFO("pieces " << arrivals.size());
    REQUIRE(arrivals.size() >= 8);
    const auto spread = std::chrono::duration_cast<std::chrono::milliseconds>(arrivals.back() - arrivals.front());
    INFO("first to last piece " << spread.count() << " ms");
    CHECK(spread >= std::chrono::milliseconds(10));
}

TEST_CASE("the endpoint answers for its alias and the engine's id, rewrites the model and refuses others", "[endpoint]") {
    EndpointOptions options;
    options.model_alias = "house-model";
    StableEndpoint endpoint(options);
    endpoint.start();
    endpoint.switch_to(engine_a().upstream());
    HttpClient through(endpoint.port());

    const Reply models = through.get("/v1/models");
    REQUIRE(models.status == 200);
    const json listed = models.parsed();
    CHECK(listed["object"] == "list");
    REQUIRE(listed["data"].size() == 2);
    CHECK(listed["data"][0]["id"] == "house-model");
    CHECK(listed["data"][0]["object"] == "model");
    CHECK(listed["data"][0]["root"] == "small-f32");
    CHECK(listed["data"][1]["id"] == "small-f32");
    CHECK(models.header("x-anvil-engine") == "engine-small-f32");

    // The engine itself refuses any id but its own: a 200 proves the endpoint rewrote the alias.
    const Reply by_alias = through.post("/v1/completions", completion("Hello", 3, {{"model", "house-model"}}));
    INFO(by_alias.body);
    CHECK(by_alias.status == 200);
    CHECK(by_alias.parsed()["model"] == "small-f32");
    CHECK(through.post("/v1/completions", completion("Hello", 3, {{"model", "small-f32"}})).status == 200);
    CHECK(through.post("/v1/completions", completion("Hello", 3, {{"model", nullptr}})).status == 200);
    const Reply stream_alias = through.post("/v1/completions", completion("Hello", 3, {{"model", "house-model"}, {"stream", true}}));
    CHECK(stream_alias.status == 200);
    CHECK(stream_complete(stream_alias));

    const Reply unknown = through.post("/v1/chat/completions",
                                       {{"model", "gpt-4"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
    CHECK(unknown.status == 404);
    const json error = unknown.parsed()["error"];
    CHECK(error["code"] == "model_not_found");
    CHECK(error["type"] == "invalid_request_error");
    CHECK_THAT(error["message"].get<std::string>(), Catch::Contains("gpt-4") && Catch::Contains("house-model"));

    const Reply nowhere = through.get("/v1/nothing");
    CHECK(nowhere.status == 404);
    CHECK(nowhere.parsed()["error"]["code"] == "not_found");

    const Reply health = through.get("/healthz");
    CHECK(health.status == 200);
    CHECK(health.parsed()["engine"] == "engine-small-f32");
}

TEST_CASE("upstream errors reach the client with their status and body", "[endpoint]") {
    ForwardingFixture f;
    HttpClient direct(engine_a().port());
    HttpClient through(f.endpoint.port());
    const json bad = {{"prompt", "Hello"}, {"max_tokens", 0}};
    const Reply d = direct.post("/v1/completions", bad);
    const Reply e = through.post("/v1/completions", bad);
    REQUIRE(d.status == 400);
    CHECK(e.status == 400);
    CHECK(e.parsed()["error"] == d.parsed()["error"]);
    CHECK(e.header("x-anvil-engine") == "engine-small-f32");

    // The same for a streaming request that the engine refuses before streaming.
    json bad_stream = bad;
    bad_stream["stream"] = true;
    const Reply es = through.post("/v1/completions", bad_stream);
    CHECK(es.status == 400);
    CHECK(es.parsed()["error"] == d.parsed()["error"]);

    // A route the engine lacks: its 404 passes through.
    const Reply embeddings = through.post("/v1/embeddings", {{"input", "Hello"}});
    CHECK(embeddings.status == 404);
    CHECK(f.endpoint.stats().upstream_errors == 0);
}
