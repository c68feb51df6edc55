// The OpenAI-compatible server over real HTTP on 127.0.0.1: an in-process engine on a tiny model,
// and once the anvil-engine binary itself.
#include <catch2/catch.hpp>

#include <httplib.h>
#include <omp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <map>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/engine.hpp"
#include "engine/make_model.hpp"
#include "engine/runner.hpp"
#include "engine/server.hpp"
#include "engine/unicode.hpp"
#include "test_engine_served.hpp"
#include "test_support.hpp"

using namespace anvil::engine;
using nlohmann::json;
using anvil::test::TempDir;
using anvil::test::engine::InProcessServer;
using anvil::test::engine::sse_events;

namespace {

// A tiny model served in-process on a free port, with one OpenMP thread (the CI machine has two
// cores shared by parallel test processes; barriers between descheduled threads only slow it).
class ServedModel {
public:
    explicit ServedModel(EngineOptions options = {}, std::string arch = "llama", std::string preset = "tiny") {
        make_model({dir_ / "model", preset, arch, "f32", 3, 1});
        if (options.max_context == 2048) options.max_context = preset == "tiny" ? 256 : 4096;
        options.threads = 1;
        ServerOptions server;
        server.served_model_name = "tiny";
        server.http_threads = 16;
        server.heartbeat_ms = 1;
        served_ = std::make_unique<InProcessServer>(dir_ / "model", options, server);
    }
    httplib::Client client() const { return served_->client(); }
    json post(const std::string& path, const json& body, int expected_status = 200) const {
        return checked(post_unchecked(path, body), expected_status);
    }
    // For other threads: HTTP only, since Catch's assertions are not thread-safe (an INFO on a
    // client thread once corrupted the main thread's message stack). Status 0: no reply.
    std::pair<int, std::string> post_unchecked(const std::string& path, const json& body) const {
        auto res = client().Post(path.c_str(), body.dump(), "application/json");
        return res ? std::make_pair(res->status, res->body) : std::make_pair(0, std::string());
    }
    static json checked(const std::pair<int, std::string>& reply, int expected_status = 200) {
        INFO(reply.second);
        REQUIRE(reply.first == expected_status);
        return json::parse(reply.second);
    }
    json metrics_values() const {
        auto res = client().Get("/metrics");
        REQUIRE(res);
        json values = json::object();
        std::istringstream lines(res->body);
        std::string line;
        while (std::getline(lines, line)) {
            if (line.empty() || line[0] == '#') continue;
            const auto brace = line.find('{'), space = line.rfind(' ');
            std::string name = line.substr(0, brace);
            if (line.find("outcome=\"") != std::string::npos) {
                const auto o = line.find("outcome=\"") + 9;
                name += "." + line.substr(o, line.find('"', o) - o);
            }
            values[name] = std::stod(line.substr(space + 1));
        }
        return values;
    }
    Engine& engine() { return served_->engine(); }
    int port() const { return served_->port(); }

private:
    TempDir dir_;
    std::unique_ptr<InProcessServer> served_;
};

json chat(const std::string& content, int max_tokens, json extra = json::object()) {
    json body = {{"messages", {{{"role", "user"}, {"content", content}}}}, {"max_tokens", max_tokens}, {"temperature", 0}};
    body.update(extra);
    return body;
}

std::string text_of(const json& response) {
    const json& choice = response["choices"][0];
    return choice.contains("message") ? choice["message"]["content"].get<std::string>() : choice["text"].get<std::string>();
}

}  // namespace

TEST_CASE("health, models and metrics answer, and health is 503 until the engine is set", "[server]") {
    Server bare(ServerOptions{"127.0.0.1", 0, "tiny", 4});
    const int port = bare.bind();
    std::thread serving([&] { bare.serve(); });
    while (!bare.running()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    httplib::Client c("127.0.0.1", port);
    auto loading = c.Get("/health");
    REQUIRE(loading);
    CHECK(loading->status == 503);
    auto early = c.Post("/v1/completions", R"({"prompt":"hi"})", "application/json");
    REQUIRE(early);
    CHECK(early->status == 503);
    bare.stop();
    serving.join();

    ServedModel served;
    auto c2 = served.client();
    auto health = c2.Get("/health");
    REQUIRE(health);
    CHECK(health->status == 200);
    auto models = c2.Get("/v1/models");
    REQUIRE(models);
    const json listed = json::parse(models->body);
    CHECK(listed["data"][0]["id"] == "tiny");
    CHECK(listed["data"][0]["max_model_len"] == 256);
    auto metrics = c2.Get("/metrics");
    REQUIRE(metrics);
    CHECK_THAT(metrics->body, Catch::Contains("# TYPE anvil_engine_generation_tokens_total counter") &&
                                  Catch::Contains("anvil_engine_kv_blocks_total{model=\"tiny\"}") &&
                                  Catch::Contains("anvil_engine_requests_waiting"));
}

TEST_CASE("chat and text completions return OpenAI shapes with token usage", "[server]") {
    ServedModel served;
    const json reply = served.post("/v1/chat/completions", chat("Hello there", 8, {{"ignore_eos", true}}));
    CHECK(reply["object"] == "chat.completion");
    CHECK(reply["model"] == "tiny");
    CHECK(reply["choices"][0]["message"]["role"] == "assistant");
    CHECK(reply["choices"][0]["finish_reason"] == "length");
    const json counted = served.post("/tokenize", {{"messages", {{{"role", "user"}, {"content", "Hello there"}}}}});
    CHECK(reply["usage"]["prompt_tokens"] == counted["count"]);
    CHECK(reply["usage"]["completion_tokens"] == 8);
    CHECK(reply["usage"]["total_tokens"] == counted["count"].get<int>() + 8);

    const json text = served.post("/v1/completions", {{"prompt", "The quick brown"}, {"max_tokens", 5}, {"temperature", 0}, {"ignore_eos", true}});
    CHECK(text["object"] == "text_completion");
    CHECK(text["usage"]["completion_tokens"] == 5);
    const json ids = served.post("/tokenize", {{"prompt", "The quick brown"}});
    CHECK(text["usage"]["prompt_tokens"] == ids["count"]);
    // The same prompt as token ids gives the same completion.
    const json by_ids = served.post("/v1/completions", {{"prompt", ids["tokens"]}, {"max_tokens", 5}, {"temperature", 0}, {"ignore_eos", true}});
    CHECK(text_of(by_ids) == text_of(text));
}

TEST_CASE("greedy output is the same alone and among concurrent requests", "[server]") {
    EngineOptions options;
    options.max_seqs = 4;
    options.max_batch_tokens = 16;  // prompts are prefilled in chunks next to others' decoding
    ServedModel served(options);
    const std::vector<std::string> prompts = {"Hello world", "The sea is wide and deep, the sea is", "What is two plus two?",
                                              "Numbers: 1 2 3", "def forward(self, x):", "Hello world"};
    std::vector<std::string> alone;
    for (const auto& p : prompts) alone.push_back(text_of(served.post("/v1/chat/completions", chat(p, 12, {{"ignore_eos", true}}))));
    std::vector<std::future<std::pair<int, std::string>>> together;
    for (const auto& p : prompts)
        together.push_back(std::async(std::launch::async, [&, p] {
            return served.post_unchecked("/v1/chat/completions", chat(p, 12, {{"ignore_eos", true}}));
        }));
    for (size_t i = 0; i < prompts.size(); ++i) CHECK(text_of(ServedModel::checked(together[i].get())) == alone[i]);
    CHECK(alone[0] == alone[5]);
    CHECK(alone[0] != alone[1]);
}

TEST_CASE("streaming sends the same text as a whole response, then usage and [DONE]", "[server]") {
    ServedModel served;
    const json whole = served.post("/v1/chat/completions", chat("Tell me about the sea", 16, {{"ignore_eos", true}}));
    auto res = served.client().Post("/v1/chat/completions",
                                    chat("Tell me about the sea", 16, {{"ignore_eos", true}, {"stream", true},
                                                                       {"stream_options", {{"include_usage", true}}}})
                                        .dump(),
                                    "application/json");
    REQUIRE(res);
    REQUIRE(res->status == 200);
    CHECK_THAT(res->get_header_value("Content-Type"), Catch::Contains("text/event-stream"));
    const auto events = sse_events(res->body);
    REQUIRE(events.size() >= 3);
    CHECK(events.back() == "[DONE]");
    std::string streamed;
    for (size_t i = 0; i + 2 < events.size(); ++i) {
        const json chunk = json::parse(events[i]);
        CHECK(chunk["object"] == "chat.completion.chunk");
        if (i == 0) CHECK(chunk["choices"][0]["delta"]["role"] == "assistant");
        streamed += chunk["choices"][0]["delta"].value("content", "");
    }
    CHECK(json::parse(events[events.size() - 3])["choices"][0]["finish_reason"] == "length");
    const json usage = json::parse(events[events.size() - 2]);
    CHECK(usage["choices"].empty());
    CHECK(usage["usage"] == whole["usage"]);
    CHECK(streamed == text_of(whole));
}

TEST_CASE("logprobs and top_logprobs describe the model's distribution", "[server]") {
    ServedModel served;
    const json reply = served.post("/v1/chat/completions", chat("Hi", 6, {{"ignore_eos", true}, {"logprobs", true}, {"top_logprobs", 3}}));
    const json& content = reply["choices"][0]["logprobs"]["content"];
    REQUIRE(content.size() == 6);
    std::string joined;
    for (const auto& entry : content) {
        CHECK(entry["logprob"].get<double>() <= 0.0);
        REQUIRE(entry["top_logprobs"].size() == 3);
        // Greedy picks the most likely token, so it heads its own alternatives.
        CHECK(entry["top_logprobs"][0]["token"] == entry["token"]);
        CHECK(entry["top_logprobs"][0]["logprob"] == entry["logprob"]);
        CHECK(entry["top_logprobs"][0]["logprob"] >= entry["top_logprobs"][1]["logprob"]);
        CHECK(entry["top_logprobs"][1]["logprob"] >= entry["top_logprobs"][2]["logprob"]);
        for (const auto& b : entry["bytes"]) joined += char(b.get<int>());
    }
    CHECK(sanitize_utf8(joined) == text_of(reply));

    const json text = served.post("/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 2}});
    const json& l = text["choices"][0]["logprobs"];
    CHECK(l["tokens"].size() == 4);
    CHECK(l["token_logprobs"].size() == 4);
    CHECK(l["top_logprobs"][0].size() == 2);
    CHECK(l["text_offset"][0] == 0);
    const json none = served.post("/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 2}});
    CHECK(none["choices"][0]["logprobs"].is_null());
}

TEST_CASE("stop strings end the text before them and seeds make sampling repeatable", "[server]") {
    ServedModel served;
    const std::string full = text_of(served.post("/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}}));
    REQUIRE(full.size() >= 6);
    // Two whole characters from the middle of the text.
    auto boundary = [&](size_t at) {
        while (at < full.size() && (static_cast<unsigned char>(full[at]) & 0xC0) == 0x80) ++at;
        return at;
    };
    const size_t from = boundary(3), to = boundary(boundary(from + 1) + 1);
    REQUIRE(to <= full.size());
    const std::string stop = full.substr(from, to - from);
    const json stopped = served.post("/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}, {"stop", {stop}}});
    CHECK(text_of(stopped) == full.substr(0, full.find(stop)));
    CHECK(stopped["choices"][0]["finish_reason"] == "stop");

    json sampled = {{"prompt", "Hello"}, {"max_tokens", 16}, {"temperature", 1.0}, {"top_p", 0.9}, {"top_k", 40}, {"seed", 42}, {"ignore_eos", true}};
    const std::string a = text_of(served.post("/v1/completions", sampled));
    const std::string b = text_of(served.post("/v1/completions", sampled));
    sampled["seed"] = 43;
    const std::string c = text_of(served.post("/v1/completions", sampled));
    CHECK(a == b);
    CHECK(a != c);
}

TEST_CASE("bad requests get OpenAI-shaped errors and long prompts are refused, not truncated", "[server]") {
    ServedModel served;
    auto c = served.client();
    auto res = c.Post("/v1/chat/completions", "{not json", "application/json");
    REQUIRE(res);
    CHECK(res->status == 400);
    const json error = json::parse(res->body);
    CHECK(error["error"]["type"] == "invalid_request_error");
    CHECK_THAT(error["error"]["message"].get<std::string>(), Catch::Contains("not valid JSON"));

    CHECK_THAT(served.post("/v1/chat/completions", {{"messages", "hi"}}, 400)["error"]["message"].get<std::string>(),
               Catch::Contains("messages"));
    CHECK_THAT(served.post("/v1/completions", {{"prompt", "hi"}, {"temperature", 5}}, 400)["error"]["message"].get<std::string>(),
               Catch::Contains("temperature"));
    CHECK_THAT(served.post("/v1/completions", {{"prompt", "hi"}, {"n", 5}}, 400)["error"]["message"].get<std::string>(),
               Catch::Contains("n must be between 1 and 4"));
    CHECK_THAT(served.post("/v1/completions", {{"prompt", "hi"}, {"model", "other"}}, 404)["error"]["message"].get<std::string>(),
               Catch::Contains("does not exist"));
    std::string long_prompt;
    for (int i = 0; i < 300; ++i) long_prompt += " word" + std::to_string(i);
    const json refused = served.post("/v1/completions", {{"prompt", long_prompt}, {"max_tokens", 1}}, 400);
    CHECK_THAT(refused["error"]["message"].get<std::string>(), Catch::Contains("context is 256 tokens"));
    CHECK(served.metrics_values()["anvil_engine_requests_total.rejected"] == 6);
}

// Each choice's text by index, from a whole response's choices or a stream's chunks.
static std::map<int, std::string> texts_by_index(const json& choices) {
    std::map<int, std::string> out;
    for (const auto& c : choices) {
        const int i = c["index"];
        if (c.contains("message")) out[i] += c["message"]["content"].get<std::string>();
        else if (c.contains("delta")) out[i] += c["delta"].value("content", "");
        else out[i] += c["text"].get<std::string>();
    }
    return out;
}

TEST_CASE("n choices: indexed, identical when greedy, each reproducible with a seed, usage counts them all", "[server]") {
    ServedModel served;
    const json one = served.post("/v1/completions", {{"prompt", "The quick brown"}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}});
    const json three = served.post("/v1/completions", {{"prompt", "The quick brown"}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}, {"n", 3}});
    REQUIRE(three["choices"].size() == 3);
    for (int i = 0; i < 3; ++i) {
        CHECK(three["choices"][i]["index"] == i);
        CHECK(three["choices"][i]["text"] == text_of(one));
        CHECK(three["choices"][i]["finish_reason"] == "length");
    }
    CHECK(three["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]);
    CHECK(three["usage"]["completion_tokens"] == 18);
    CHECK(three["usage"]["total_tokens"] == one["usage"]["prompt_tokens"].get<int>() + 18);

    json sampled = {{"prompt", "Hello"}, {"max_tokens", 16}, {"temperature", 1.0}, {"seed", 7}, {"ignore_eos", true}};
    const std::string alone = text_of(served.post("/v1/completions", sampled));
    sampled["n"] = 3;
    const auto first = texts_by_index(served.post("/v1/completions", sampled)["choices"]);
    const auto again = texts_by_index(served.post("/v1/completions", sampled)["choices"]);
    REQUIRE(first.size() == 3);
    CHECK(first == again);          // every choice repeats with the seed
    CHECK(first.at(0) == alone);    // choice 0 is what n = 1 gives
    CHECK(first.at(0) != first.at(1));  // the others are sampled independently
    CHECK(first.at(1) != first.at(2));

    const json chats = served.post("/v1/chat/completions", chat("Hi", 5, {{"ignore_eos", true}, {"n", 2}, {"logprobs", true}}));
    REQUIRE(chats["choices"].size() == 2);
    CHECK(chats["choices"][0]["message"] == chats["choices"][1]["message"]);
    CHECK(chats["choices"][1]["logprobs"]["content"].size() == 5);
    CHECK(chats["usage"]["completion_tokens"] == 10);
    CHECK_THAT(served.post("/v1/completions", {{"prompt", "hi"}, {"n", 0}}, 400)["error"]["message"].get<std::string>(),
               Catch::Contains("n must be between 1 and 128"));
}

TEST_CASE("n choices stream as chunks tagged with their index, then usage for all and [DONE]", "[server]") {
    ServedModel served;
    for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
        INFO(path);
        const bool is_chat = std::string(path) == "/v1/chat/completions";
        json body = is_chat ? chat("Tell me about the sea", 8, {{"ignore_eos", true}, {"n", 3}, {"temperature", 0.8}, {"seed", 11}})
                            : json{{"prompt", "Tell me about the sea"}, {"max_tokens", 8}, {"ignore_eos", true}, {"n", 3},
                                   {"temperature", 0.8}, {"seed", 11}};
        const json whole = served.post(path, body);
        body["stream"] = true;
        body["stream_options"] = {{"include_usage", true}};
        auto res = served.client().Post(path, body.dump(), "application/json");
        REQUIRE(res);
        REQUIRE(res->status == 200);
        const auto events = sse_events(res->body);
        REQUIRE(events.size() >= 5);
        CHECK(events.back() == "[DONE]");
        json chunks = json::array();
        std::map<int, int> finishes, roles;
        for (size_t i = 0; i + 2 < events.size(); ++i) {
            const json chunk = json::parse(events[i]);
            REQUIRE(chunk["choices"].size() == 1);
            const json& c = chunk["choices"][0];
            const int index = c["index"];
            if (is_chat && c["delta"].contains("role")) roles[index] += 1;
            if (!c["finish_reason"].is_null()) finishes[index] += 1;
            chunks.push_back(c);
        }
        CHECK(finishes == std::map<int, int>{{0, 1}, {1, 1}, {2, 1}});
        if (is_chat) CHECK(roles == std::map<int, int>{{0, 1}, {1, 1}, {2, 1}});
        CHECK(texts_by_index(chunks) == texts_by_index(whole["choices"]));
        const json usage = json::parse(events[events.size() - 2]);
        CHECK(usage["choices"].empty());
        CHECK(usage["usage"] == whole["usage"]);
        CHECK(usage["usage"]["completion_tokens"] == 24);
    }
}

TEST_CASE("echo puts the prompt before the completion, whole and streamed, with the prompt's logprobs when asked", "[server]") {
    ServedModel served;
    const json plain = {{"prompt", "The quick brown"}, {"max_tokens", 5}, {"temperature", 0}, {"ignore_eos", true}};
    const std::string completion = text_of(served.post("/v1/completions", plain));
    json echoed = plain;
    echoed["echo"] = true;
    const json reply = served.post("/v1/completions", echoed);
    CHECK(text_of(reply) == "The quick brown" + completion);
    CHECK(reply["usage"]["completion_tokens"] == 5);

    // Token ids are echoed as their text.
    const json ids = served.post("/tokenize", {{"prompt", "The quick brown"}, {"add_special_tokens", false}});
    echoed["prompt"] = ids["tokens"];
    CHECK(text_of(served.post("/v1/completions", echoed)) == "The quick brown" + text_of(served.post("/v1/completions", {{"prompt", ids["tokens"]}, {"max_tokens", 5}, {"temperature", 0}, {"ignore_eos", true}})));

    echoed["prompt"] = "The quick brown";
    echoed["n"] = 2;
    const json echoed_reply = served.post("/v1/completions", echoed);  // kept: a range-for over a temporary's member dangles
    for (const auto& c : echoed_reply["choices"]) CHECK(c["text"] == "The quick brown" + completion);

    echoed["stream"] = true;
    auto res = served.client().Post("/v1/completions", echoed.dump(), "application/json");
    REQUIRE(res);
    REQUIRE(res->status == 200);
    const auto events = sse_events(res->body);
    REQUIRE(events.size() >= 3);
    json chunks = json::array();
    for (size_t i = 0; i + 1 < events.size(); ++i) chunks.push_back(json::parse(events[i])["choices"][0]);
    CHECK(texts_by_index(chunks) == std::map<int, std::string>{{0, "The quick brown" + completion}, {1, "The quick brown" + completion}});

    // With logprobs, every choice's logprobs start with the prompt's tokens (the first null), whose
    // offsets cover the echoed text; the answer's tokens follow at its end (the values are checked
    // against a forward pass in test_engine_prompt_logprobs.cpp).
    json with_logprobs = plain;
    with_logprobs["echo"] = true;
    with_logprobs["logprobs"] = 1;
    with_logprobs["n"] = 2;
    const json scored = served.post("/v1/completions", with_logprobs);
    const size_t prompt_tokens = scored["usage"]["prompt_tokens"];
    REQUIRE(prompt_tokens >= 2);
    for (const auto& c : scored["choices"]) {
        CHECK(c["text"] == "The quick brown" + completion);
        const json& l = c["logprobs"];
        REQUIRE(l["tokens"].size() == prompt_tokens + 5);
        CHECK(l["token_logprobs"][0].is_null());
        CHECK(l["top_logprobs"][0].is_null());
        for (size_t k = 1; k < prompt_tokens + 5; ++k) CHECK(l["token_logprobs"][k].get<double>() <= 0.0);
        const size_t last = prompt_tokens - 1;
        CHECK(l["text_offset"][last].get<size_t>() + l["tokens"][last].get<std::string>().size() == 15);
        CHECK(l["text_offset"][prompt_tokens] == 15);
    }
    CHECK(scored["choices"][0]["logprobs"] == scored["choices"][1]["logprobs"]);  // greedy: the same choice twice
}

TEST_CASE("a client that disconnects frees its sequence and KV blocks", "[server]") {
    // The small model's 4,000 tokens take seconds, so the request cannot end by itself before the
    // server sees the client go, however fast the engine or however loaded the machine.
    constexpr int kMaxTokens = 4000;
    ServedModel served({}, "llama", "small");
    for (bool stream : {true, false}) {
        INFO("stream " << stream);
        const double aborted_before = served.metrics_values()["anvil_engine_requests_total.aborted"].get<double>();
        auto c = served.client();
        int chunks = 0;
        httplib::Request req;
        req.method = "POST";
        req.path = "/v1/completions";
        req.set_header("Content-Type", "application/json");
        req.body = json{{"prompt", "Hello"}, {"max_tokens", kMaxTokens}, {"ignore_eos", true}, {"stream", stream}}.dump();
        req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
            // Streaming: leave after the first token. Whole body: after the first heartbeat (1 ms).
            return ++chunks < 1;
        };
        c.send(req);
        json m;
        for (int i = 0; i < 500; ++i) {
            m = served.metrics_values();
            if (m["anvil_engine_requests_total.aborted"].get<double>() > aborted_before) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        CHECK(m["anvil_engine_requests_total.aborted"].get<double>() == aborted_before + 1);
        CHECK(m["anvil_engine_kv_blocks_used"] == 0);
        CHECK(m["anvil_engine_requests_running"] == 0);
        CHECK(m["anvil_engine_generation_tokens_total"].get<double>() < kMaxTokens * (stream ? 1 : 2));
    }
}

TEST_CASE("requests that do not fit in the KV cache wait for room instead of failing", "[server]") {
    EngineOptions options;
    options.max_seqs = 4;
    options.kv_blocks = 3;  // 48 positions: one sequence of 40 at a time
    ServedModel served(options);
    std::vector<std::future<std::pair<int, std::string>>> replies;
    for (int i = 0; i < 3; ++i)
        replies.push_back(std::async(std::launch::async, [&] {
            return served.post_unchecked("/v1/completions", {{"prompt", "Hello world"}, {"max_tokens", 30}, {"temperature", 0}, {"ignore_eos", true}});
        }));
    std::string first;
    for (auto& r : replies) {
        const json reply = ServedModel::checked(r.get());
        CHECK(reply["usage"]["completion_tokens"] == 30);
        if (first.empty()) first = text_of(reply);
        CHECK(text_of(reply) == first);
    }
    json m = served.metrics_values();
    CHECK(m["anvil_engine_kv_blocks_used"] == 0);
    CHECK(m["anvil_engine_kv_blocks_total"] == 3);
    // A prompt the whole cache could never hold is refused at once.
    std::string long_prompt;
    for (int i = 0; i < 60; ++i) long_prompt += " w" + std::to_string(i);
    CHECK_THAT(served.post("/v1/completions", {{"prompt", long_prompt}}, 400)["error"]["message"].get<std::string>(),
               Catch::Contains("KV-cache blocks"));
}

TEST_CASE("a model without a chat template serves completions and refuses chat with the reason", "[server]") {
    TempDir dir;
    make_model({dir / "m", "tiny", "qwen2", "f32", 3, 1});
    json config = json::parse(anvil::test::read_file(dir / "m" / "tokenizer_config.json"));
    config.erase("chat_template");
    anvil::test::write_file(dir / "m" / "tokenizer_config.json", config.dump());
    EngineOptions options;
    options.max_context = 128;
    options.threads = 1;
    Engine engine(dir / "m", options);
    Server server(ServerOptions{"127.0.0.1", 0, "plain", 8, 50});
    const int port = server.bind();
    server.set_engine(&engine);
    std::thread serving([&] { server.serve(); });
    while (!server.running()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    httplib::Client c("127.0.0.1", port);
    auto refused = c.Post("/v1/chat/completions", chat("Hi", 2).dump(), "application/json");
    REQUIRE(refused);
    CHECK(refused->status == 400);
    CHECK_THAT(refused->body, Catch::Contains("no chat_template") && Catch::Contains("/v1/completions"));
    auto served = c.Post("/v1/completions", json{{"prompt", "Hi"}, {"max_tokens", 2}}.dump(), "application/json");
    REQUIRE(served);
    CHECK(served->status == 200);
    server.stop();
    serving.join();
}

TEST_CASE("anvil-engine serve --device: a bad name, a fraction out of range and a missing GPU are refused in one line",
          "[server]") {
    TempDir dir;
    const auto made = anvil::test::run({ANVIL_ENGINE, "make-model", "--out", (dir / "m").string(), "--preset", "tiny"});
    INFO(made.output);
    REQUIRE(made.exit_code == 0);
    const std::string model = (dir / "m").string();
    const auto named = anvil::test::run({ANVIL_ENGINE, "serve", "--model", model, "--device", "gpu0"});
    CHECK(named.exit_code != 0);
    CHECK_THAT(named.output, Catch::Contains("--device: device \"gpu0\": expected cpu, cuda or cuda:N"));
    const auto fraction = anvil::test::run({ANVIL_ENGINE, "serve", "--model", model, "--device", "cuda:0",
                                            "--gpu-memory-utilization", "1.5"});
    CHECK(fraction.exit_code != 0);
    CHECK_THAT(fraction.output, Catch::Contains("--gpu-memory-utilization 1.5: expected a fraction above 0 and at most 1"));
    const auto on_cpu = anvil::test::run({ANVIL_ENGINE, "serve", "--model", model, "--gpu-memory-utilization", "0.5"});
    CHECK(on_cpu.exit_code != 0);
    CHECK_THAT(on_cpu.output, Catch::Contains("--gpu-memory-utilization applies to --device cuda:N only"));

    std::string reason;
    if (anvil::engine::cuda_devices(reason) > 0) {
        WARN("this machine has a CUDA device: its refusal is not tested here");
        return;
    }
    // No GPU here (or no GPU runner in this build): the engine fails to load, saying why.
    const auto missing = anvil::test::run({ANVIL_ENGINE, "serve", "--model", model, "--port", "0", "--device", "cuda:0"});
    INFO(missing.output);
    CHECK(missing.exit_code != 0);
    CHECK_THAT(missing.output, Catch::Contains("cannot load") && Catch::Contains("cuda:0: no CUDA device"));
}

TEST_CASE("anvil-engine refuses a flag given twice, in either spelling, before it loads anything", "[server][hardening]") {
    TempDir dir;
    const std::string model = (dir / "never-read").string();
    for (const std::vector<std::string>& twice :
         {std::vector<std::string>{"--model", model, "--model", "/elsewhere"}, {"--model", model, "--model=/elsewhere"},
          {"--model", model, "--port", "0", "--port=1"}}) {
        std::vector<std::string> argv = {ANVIL_ENGINE, "serve"};
        argv.insert(argv.end(), twice.begin(), twice.end());
        const auto r = anvil::test::run(argv);
        INFO(r.output);
        CHECK(r.exit_code == 2);
        CHECK_THAT(r.output, Catch::Contains(" is given twice; give it once"));
    }
}

TEST_CASE("anvil-engine make-model and serve work as commands", "[server]") {
    TempDir dir;
    const auto made = anvil::test::run({ANVIL_ENGINE, "make-model", "--out", (dir / "m").string(), "--preset", "tiny", "--seed", "4"});
    INFO(made.output);
    REQUIRE(made.exit_code == 0);
    const auto bad = anvil::test::run({ANVIL_ENGINE, "serve", "--model", (dir / "missing").string(), "--port", "0"});
    CHECK(bad.exit_code == 1);
    CHECK_THAT(bad.output, Catch::Contains("cannot load") && Catch::Contains("config.json"));
    const auto usage = anvil::test::run({ANVIL_ENGINE, "serve", "--model", (dir / "m").string(), "--weights", "q4"});
    CHECK(usage.exit_code != 0);
    CHECK_THAT(usage.output, Catch::Contains("--weights q4: expected f32, bf16, q8"));

    const auto log = dir / "serve.log";
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        std::FILE* out = std::freopen(log.c_str(), "w", stdout);
        (void)out;
        ::dup2(STDOUT_FILENO, STDERR_FILENO);
        ::execl(ANVIL_ENGINE, ANVIL_ENGINE, "serve", "--model", (dir / "m").c_str(), "--port", "0", "--served-model-name",
                "cli-model", "--weights", "q8", "--kv-dtype", "bf16", "--max-context", "128", "--max-seqs", "2",
                "--threads", "1", "--seed", "9", static_cast<char*>(nullptr));
        _exit(127);
    }
    int port = 0;
    const std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
    for (int i = 0; i < 1000 && port == 0; ++i) {
        std::smatch m;
        const std::string text = std::filesystem::exists(log) ? anvil::test::read_file(log) : "";
        if (std::regex_search(text, m, listening)) port = std::stoi(m[1]);
        else std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    REQUIRE(port > 0);
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    int status = 0;
    for (int i = 0; i < 1000 && status != 200; ++i) {
        auto h = c.Get("/health");
        status = h ? h->status : 0;
        if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(status == 200);
    auto res = c.Post("/v1/chat/completions", chat("Hi", 4, {{"model", "cli-model"}}).dump(), "application/json");
    REQUIRE(res);
    CHECK(res->status == 200);
    CHECK(json::parse(res->body)["model"] == "cli-model");
    ::kill(pid, SIGTERM);
    int wstatus = 0;
    ::waitpid(pid, &wstatus, 0);
    CHECK(WIFEXITED(wstatus));
    CHECK(WEXITSTATUS(wstatus) == 0);
}
