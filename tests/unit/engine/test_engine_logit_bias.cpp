// logit_bias against a real engine over HTTP: a bias moves greedy and sampled choices, -100 bans
// a token, +100 forces one, logprobs describe the biased distribution, no bias changes nothing
// (nor reading a greedy row for its largest alone);
// and a token id the vocabulary does not hold (in logit_bias or in a token-id prompt) is a 400
// with an OpenAI-style body, never a crash or a 500.
#include <catch2/catch.hpp>

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/engine.hpp"
#include "engine/make_model.hpp"
#include "engine/server.hpp"
#include "engine/unicode.hpp"
#include "test_engine_served.hpp"
#include "test_support.hpp"

using namespace anvil::engine;
using nlohmann::json;

namespace {

// The tiny test model served in-process on a free port, with one OpenMP thread.
class BiasServer {
public:
    BiasServer() {
        make_model({dir_ / "model", "tiny", "llama", "f32", 3, 1});
        EngineOptions options;
        options.max_context = 256;
        options.threads = 1;
        ServerOptions server;
        server.served_model_name = "tiny";
        server.heartbeat_ms = 1;
        served_ = std::make_unique<anvil::test::engine::InProcessServer>(dir_ / "model", options, server);
    }
    json post(const std::string& path, const json& body, int expected_status = 200) const {
        auto res = served_->client().Post(path.c_str(), body.dump(), "application/json");
        REQUIRE(res);
        INFO(path << " " << body.dump() << " -> " << res->body);
        REQUIRE(res->status == expected_status);
        if (body.value("stream", false) && res->status == 200) return res->body;  // SSE, not one JSON body
        return json::parse(res->body);
    }
    const Tokenizer& tokenizer() const { return served_->engine().tokenizer(); }
    int vocab() const { return served_->engine().config().vocab_size; }

    // The greedy chat reply's tokens, as ids (from the bytes its logprobs carry).
    std::vector<int32_t> chat_tokens(const std::string& content, int max_tokens, json extra = json::object()) const {
        json body = {{"messages", {{{"role", "user"}, {"content", content}}}},
                     {"max_tokens", max_tokens},
                     {"temperature", 0},
                     {"ignore_eos", true},
                     {"logprobs", true}};
        body.update(extra);
        const json reply = post("/v1/chat/completions", body);
        INFO(reply.dump());
        std::vector<int32_t> ids;
        for (const auto& entry : reply["choices"][0]["logprobs"]["content"]) ids.push_back(id_of(entry["bytes"]));
        REQUIRE(int(ids.size()) == max_tokens);
        return ids;
    }

    // The one token whose bytes these are.
    int32_t id_of(const json& byte_values) const {
        std::string bytes;
        for (const auto& b : byte_values) bytes += char(b.get<int>());
        std::vector<int32_t> found;
        for (int32_t id = 0; id < tokenizer().vocab_size(); ++id)
            if (tokenizer().token_bytes(id) == bytes) found.push_back(id);
        INFO("token bytes " << byte_values.dump());
        REQUIRE(found.size() == 1);
        return found[0];
    }

    // An ordinary token (not special, several printable ASCII bytes) not in `avoid`, for forcing.
    int32_t printable_token(const std::vector<int32_t>& avoid) const {
        for (int32_t id = tokenizer().vocab_size() - 1; id >= 0; --id) {
            const std::string& b = tokenizer().token_bytes(id);
            if (tokenizer().is_special(id) || b.size() < 2 || std::find(avoid.begin(), avoid.end(), id) != avoid.end())
                continue;
            if (std::all_of(b.begin(), b.end(), [](char c) { return c > ' ' && c < 127; })) return id;
        }
        FAIL("the test model has no printable multi-byte token");
        return -1;
    }

private:
    anvil::test::TempDir dir_;
    std::unique_ptr<anvil::test::engine::InProcessServer> served_;
};

json bias(int32_t token, double value) { return {{std::to_string(token), value}}; }

void check_openai_error(const json& reply, const std::string& message) {
    CHECK(reply["error"]["message"] == message);
    CHECK(reply["error"]["type"] == "invalid_request_error");
    CHECK(reply["error"]["code"] == 400);
    CHECK(reply["error"].contains("param"));
}

}  // namespace

TEST_CASE("apply_logit_bias copies nothing without a bias, and adds each bias to a copy", "[engine][logit_bias]") {
    const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.5f};
    SamplerScratch scratch;
    scratch.reserve(4);
    CHECK(apply_logit_bias(logits.data(), 4, {}, scratch) == logits.data());

    const float* biased = apply_logit_bias(logits.data(), 4, {{1, -100.0f}, {3, 2.5f}}, scratch);
    REQUIRE(biased == scratch.biased.data());
    CHECK(std::vector<float>(biased, biased + 4) == std::vector<float>{1.0f, -97.0f, 2.0f, 3.0f});
    CHECK(logits == std::vector<float>{1.0f, 3.0f, 2.0f, 0.5f});  // the model's row is left as it was
    SamplingParams greedy;
    greedy.temperature = 0;
    Rng rng(1);
    CHECK(sample_token(logits.data(), 4, greedy, rng, scratch) == 1);
    CHECK(sample_token(biased, 4, greedy, rng, scratch) == 3);
}

TEST_CASE("a -100 logit_bias on the greedy token makes greedy choose another token", "[engine][server][logit_bias]") {
    BiasServer served;
    const int32_t greedy = served.chat_tokens("Hello there", 1)[0];
    const std::vector<int32_t> banned = served.chat_tokens("Hello there", 4, {{"logit_bias", bias(greedy, -100)}});
    REQUIRE(banned.size() == 4);
    for (int32_t t : banned) CHECK(t != greedy);

    // Completions: the banned token's text is no longer the first token's.
    const json plain = {{"prompt", "The quick brown"}, {"max_tokens", 1}, {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 0}};
    const std::string first = served.post("/v1/completions", plain)["choices"][0]["logprobs"]["tokens"][0];
    json every_such_token = json::object();  // each id whose text reads the same, so that none can stand in
    for (int32_t id = 0; id < served.tokenizer().vocab_size(); ++id)
        if (sanitize_utf8(served.tokenizer().token_bytes(id)) == first) every_such_token[std::to_string(id)] = -100;
    json biased = plain;
    biased["logit_bias"] = every_such_token;
    CHECK(served.post("/v1/completions", biased)["choices"][0]["logprobs"]["tokens"][0] != first);
}

TEST_CASE("a +100 logit_bias forces a token, greedy or sampled, on both endpoints", "[engine][server][logit_bias]") {
    BiasServer served;
    const std::vector<int32_t> plain = served.chat_tokens("Hello there", 3);
    const int32_t forced = served.printable_token(plain);
    const std::string text = served.tokenizer().token_bytes(forced);
    INFO("forcing token " << forced << " \"" << text << "\"");

    CHECK(served.chat_tokens("Hello there", 3, {{"logit_bias", bias(forced, 100)}}) == std::vector<int32_t>(3, forced));
    const json completion = {{"prompt", "The quick brown"}, {"max_tokens", 3}, {"temperature", 0},
                             {"ignore_eos", true}, {"logit_bias", bias(forced, 100)}};
    CHECK(served.post("/v1/completions", completion)["choices"][0]["text"] == text + text + text);
    // The bias goes in before temperature, top-k and top-p.
    json sampled = completion;
    sampled.update({{"temperature", 1.5}, {"top_p", 0.9}, {"top_k", 50}, {"seed", 7}, {"n", 2}});
    const json reply = served.post("/v1/completions", sampled);  // kept: a range-for over a temporary's member dangles
    for (const auto& choice : reply["choices"]) CHECK(choice["text"] == text + text + text);
}

TEST_CASE("reported logprobs are those of the biased distribution (before temperature)", "[engine][server][logit_bias]") {
    BiasServer served;
    const int32_t forced = served.printable_token(served.chat_tokens("Hi", 1));
    const json reply = served.post("/v1/chat/completions",
                                   {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 1}, {"temperature", 0},
                                    {"logprobs", true}, {"top_logprobs", 2}, {"logit_bias", bias(forced, 100)}});
    const json& entry = reply["choices"][0]["logprobs"]["content"][0];
    CHECK(served.id_of(entry["bytes"]) == forced);
    CHECK(entry["logprob"].get<double>() > -1e-3);  // ~100 nats above every other token
    CHECK(entry["top_logprobs"][1]["logprob"].get<double>() < -50);
}

TEST_CASE("without logit_bias, or with biases that move nothing, the output is unchanged", "[engine][server][logit_bias]") {
    BiasServer served;
    const auto body = [](json extra) {
        json b = {{"messages", {{{"role", "user"}, {"content", "Tell me about the sea"}}}}, {"max_tokens", 8},
                  {"temperature", 0}, {"ignore_eos", true}, {"logprobs", true}, {"top_logprobs", 3}};
        b.update(extra);
        return b;
    };
    const json baseline = served.post("/v1/chat/completions", body(json::object()))["choices"][0]["logprobs"];
    const std::vector<int32_t> tokens = served.chat_tokens("Tell me about the sea", 8);
    const int32_t unused = served.printable_token(tokens);
    for (const json& extra : {json{{"logit_bias", nullptr}}, json{{"logit_bias", json::object()}},
                              json{{"logit_bias", bias(tokens[0], 0)}}}) {
        INFO(extra.dump());
        CHECK(served.post("/v1/chat/completions", body(extra))["choices"][0]["logprobs"] == baseline);
    }
    // Banning a token greedy never chose leaves the choices as they were.
    CHECK(served.chat_tokens("Tell me about the sea", 8, {{"logit_bias", bias(unused, -100)}}) == tokens);
    // Without logprobs or a bias a greedy row is read for its largest alone (Runner::argmax, found
    // on the device by a GPU): the same answer.
    json plain = body(json::object());
    plain.erase("logprobs");
    plain.erase("top_logprobs");
    const json whole = served.post("/v1/chat/completions", body(json::object()))["choices"][0]["message"];
    CHECK(served.post("/v1/chat/completions", plain)["choices"][0]["message"] == whole);
}

TEST_CASE("a token id outside the vocabulary is a 400 with an OpenAI-style error, never a 500", "[engine][server][logit_bias]") {
    BiasServer served;
    const std::string vocab = std::to_string(served.vocab());
    const json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}};
    const json completion = {{"prompt", "Hi"}, {"max_tokens", 2}};

    for (const json& base : {chat, completion}) {
        const std::string path = base.contains("messages") ? "/v1/chat/completions" : "/v1/completions";
        for (bool stream : {false, true}) {
            json body = base;
            body["stream"] = stream;
            body["logit_bias"] = {{"99999", -100}};
            check_openai_error(served.post(path, body, 400),
                               "logit_bias: token id 99999 does not exist (the vocabulary has " + vocab + " tokens)");
            body["logit_bias"] = bias(served.vocab(), 5);
            check_openai_error(served.post(path, body, 400), "logit_bias: token id " + vocab +
                                                                 " does not exist (the vocabulary has " + vocab + " tokens)");
            body["logit_bias"] = bias(served.vocab() - 1, 5);  // the last id exists
            served.post(path, body, 200);
            body["logit_bias"] = {{"3", 150}};
            check_openai_error(served.post(path, body, 400), "logit_bias: the bias of token id 3 is 150; it must be from -100 to 100");
        }
    }

    // A completions prompt of token ids, with and without echo (which decodes the prompt first).
    for (bool echo : {false, true}) {
        const json body = {{"prompt", {1, 2, 99999}}, {"max_tokens", 2}, {"echo", echo}};
        check_openai_error(served.post("/v1/completions", body, 400),
                           "prompt: token id 99999 does not exist (the vocabulary has " + vocab + " tokens)");
    }
    check_openai_error(served.post("/v1/completions", {{"prompt", {1, served.vocab()}}}, 400),
                       "prompt: token id " + vocab + " does not exist (the vocabulary has " + vocab + " tokens)");
    check_openai_error(served.post("/v1/completions", {{"prompt", {1, 4294967301LL}}}, 400),
                       "prompt: token id 4294967301 does not exist");
    check_openai_error(served.post("/v1/completions", {{"prompt", {-7}}}, 400), "prompt: token id -7 does not exist");
    // The server is still serving.
    CHECK(served.post("/v1/completions", {{"prompt", {1, served.vocab() - 1}}, {"max_tokens", 1}})["choices"].size() == 1);
}
