// Structured output against a real engine: the vocabulary trie's masks equal a token-by-token
// check of the matcher; response_format json_object and json_schema over HTTP give answers that
// parse and follow the schema, sampled, streamed, with n choices and with a draft; logprobs
// describe the constrained distribution; a schema outside the subset is a 400 naming its path.
#include <catch2/catch.hpp>

#include <httplib.h>

#include <random>

#include <nlohmann/json.hpp>

#include "engine/engine.hpp"
#include "engine/json_grammar.hpp"
#include "engine/make_model.hpp"
#include "engine/server.hpp"
#include "engine/token_mask.hpp"
#include "test_engine_served.hpp"
#include "test_support.hpp"

using namespace anvil::engine;
using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

const char* kPersonSchema = R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["red", "green"]}, "maxItems": 2}, "ok": {"type": "boolean"}},
    "required": ["name", "age", "ok"]})";

// What the schema above means, checked on the parsed answer.
void require_person(const std::string& text) {
    INFO(text);
    REQUIRE(json::accept(text));
    const ojson v = ojson::parse(text);
    REQUIRE(v.is_object());
    std::vector<std::string> keys;
    for (const auto& [k, _] : v.items()) keys.push_back(k);
    REQUIRE(keys.size() >= 3);
    CHECK(keys[0] == "name");
    CHECK(keys[1] == "age");
    CHECK(keys.back() == "ok");
    CHECK(v["name"].is_string());
    CHECK(v["age"].is_number_integer());
    CHECK(v["ok"].is_boolean());
    if (v.contains("tags")) {
        CHECK(v["tags"].size() <= 2);
        for (const auto& t : v["tags"]) CHECK((t == "red" || t == "green"));
    }
}

class StructuredServer {
public:
    explicit StructuredServer(DraftOptions draft = {}) {
        EngineOptions options;
        options.max_context = 512;
        options.draft = draft;
        served_ = anvil::test::engine::serve_tiny(dir_ / "model", options);
    }
    httplib::Result post(const std::string& path, const std::string& body) const {
        return served_->client().Post(path.c_str(), body, "application/json");
    }
    // Bodies are ordered_json, so that a schema's properties keep their order on the wire.
    json post_ok(const std::string& path, const ojson& body) const {
        auto res = post(path, body.dump());
        REQUIRE(res);
        INFO(body.dump() << " -> " << res->body);
        REQUIRE(res->status == 200);
        if (body.value("stream", false)) return res->body;
        return json::parse(res->body);
    }
    std::string get(const std::string& path) const {
        auto res = served_->client().Get(path.c_str());
        REQUIRE(res);
        REQUIRE(res->status == 200);
        return res->body;
    }
    Engine& engine() { return served_->engine(); }

private:
    anvil::test::TempDir dir_;
    std::unique_ptr<anvil::test::engine::InProcessServer> served_;
};

ojson schema_format(const char* schema) {
    return {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"strict", true}, {"schema", ojson::parse(schema)}}}};
}

ojson chat(const ojson& format, int max_tokens, double temperature, int seed) {
    return {{"messages", {{{"role", "user"}, {"content", "Describe a person as JSON."}}}},
            {"response_format", format},
            {"max_tokens", max_tokens},
            {"temperature", temperature},
            {"seed", seed}};
}

// A random-weight model's strings rarely end: a bias on the tokens holding a quote ends them
// sooner, as a trained model's would (the bias applies before the grammar's mask).
ojson quotes_favoured(ojson body, const Tokenizer& tokenizer, float bias) {
    ojson biases = ojson::object();
    for (int32_t t = 0; t < tokenizer.vocab_size(); ++t)
        if (!tokenizer.is_special(t) && tokenizer.token_bytes(t).find('"') != std::string::npos)
            biases[std::to_string(t)] = bias;
    body["logit_bias"] = biases;
    return body;
}

}  // namespace

TEST_CASE("structured output: the trie's mask is the set of tokens the matcher takes, token by token", "[engine][structured]") {
    anvil::test::TempDir dir;
    make_model({dir / "model", "tiny", "llama", "f32", 3, 1});
    const Tokenizer tokenizer = Tokenizer::load(dir / "model");
    VocabularyTrie trie(tokenizer);
    const int vocab = tokenizer.vocab_size();
    const auto g = JsonGrammar::from_schema(ojson::parse(kPersonSchema), "schema");
    std::mt19937 rng(7);
    TokenMask mask;
    int states = 0, plain_states = 0;
    for (int walk = 0; walk < 20; ++walk) {
        JsonMatcher m(g);
        for (int step = 0; step < 60 && !m.done(); ++step) {
            trie.allowed(m, vocab, mask);
            std::vector<int32_t> allowed;
            for (int32_t t = 0; t < vocab; ++t) {
                JsonMatcher probe = m;
                const bool takes = !tokenizer.is_special(t) && !tokenizer.token_bytes(t).empty() &&
                                   probe.feed(tokenizer.token_bytes(t));
                INFO("walk " << walk << " step " << step << " token " << t << " '" << tokenizer.token_bytes(t) << "'");
                REQUIRE(mask.test(t) == takes);
                if (takes) allowed.push_back(t);
            }
            ++states;
            plain_states += m.in_plain_string();
            if (allowed.empty()) break;
            // Strings end sooner when a closing token is likelier: favour tokens holding a quote.
            std::vector<int32_t> closing;
            for (int32_t t : allowed)
                if (tokenizer.token_bytes(t).find('"') != std::string::npos) closing.push_back(t);
            const auto& pool = !closing.empty() && rng() % 2 ? closing : allowed;
            REQUIRE(m.feed(tokenizer.token_bytes(pool[rng() % pool.size()])));
        }
    }
    CHECK(states > 200);
    CHECK(plain_states > 20);  // the shortcut for free string text was exercised
}

TEST_CASE("structured output: json_schema and json_object answers parse and follow the schema", "[engine][structured]") {
    StructuredServer server;
    const ojson format = schema_format(kPersonSchema);
    int whole = 0;
    for (int seed = 0; seed < 6; ++seed) {
        ojson body = quotes_favoured(chat(format, 160, 1.0, seed), server.engine().tokenizer(), 4);
        body["n"] = 2;
        const json reply = server.post_ok("/v1/chat/completions", body);
        for (const auto& choice : reply["choices"]) {
            const std::string text = choice["message"]["content"];
            if (choice["finish_reason"] == "length") {
                // Cut by max_tokens: a prefix the grammar still takes, never text it refuses.
                JsonMatcher m(JsonGrammar::from_schema(ojson::parse(kPersonSchema), "schema"));
                INFO(text);
                CHECK(m.feed(text));
                continue;
            }
            REQUIRE(choice["finish_reason"] == "stop");
            require_person(text);
            ++whole;
        }
    }
    CHECK(whole >= 4);

    // Greedy, streamed: the same answer as one body, and it parses.
    const ojson greedy_body = quotes_favoured(chat(format, 300, 0.0, 1), server.engine().tokenizer(), 4);
    const json greedy = server.post_ok("/v1/chat/completions", greedy_body);
    REQUIRE(greedy["choices"][0]["finish_reason"] == "stop");
    require_person(greedy["choices"][0]["message"]["content"]);
    ojson streamed_body = greedy_body;
    streamed_body["stream"] = true;
    std::string streamed;
    for (const auto& e : anvil::test::engine::sse_events(server.post_ok("/v1/chat/completions", streamed_body))) {
        if (e == "[DONE]") continue;
        const json chunk = json::parse(e);
        const json& delta = chunk["choices"][0]["delta"];
        if (delta.contains("content")) streamed += delta["content"].get<std::string>();
    }
    CHECK(streamed == greedy["choices"][0]["message"]["content"]);

    // json_object on completions too: an object, whatever its keys.
    int objects = 0;
    for (int seed = 0; seed < 4; ++seed) {
        const json reply = server.post_ok(
            "/v1/completions", quotes_favoured({{"prompt", "The answer as JSON:"},
                                                {"response_format", {{"type", "json_object"}}},
                                                {"max_tokens", 200},
                                                {"seed", seed}},
                                               server.engine().tokenizer(), 4));
        const std::string text = reply["choices"][0]["text"];
        INFO(text);
        if (reply["choices"][0]["finish_reason"] == "length") continue;
        REQUIRE(json::accept(text));
        CHECK(json::parse(text).is_object());
        ++objects;
    }
    CHECK(objects >= 2);
    // {"type": "text"} constrains nothing: the same greedy text as no response_format.
    const json plain = server.post_ok("/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 12}, {"temperature", 0}});
    const json text = server.post_ok("/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 12}, {"temperature", 0},
                                                         {"response_format", {{"type", "text"}}}});
    CHECK(plain["choices"][0]["text"] == text["choices"][0]["text"]);

    const std::string metrics = server.get("/metrics");
    CHECK_THAT(metrics, Catch::Contains("anvil_engine_constrained_tokens_total{model=\"tiny\"}"));
    CHECK(server.engine().metrics().constrained_tokens.load() > 100);
}

TEST_CASE("structured output: logprobs are the constrained distribution's", "[engine][structured]") {
    StructuredServer server;
    ojson body = chat(schema_format(kPersonSchema), 40, 1.0, 3);
    body["logprobs"] = true;
    body["top_logprobs"] = 20;
    const json reply = server.post_ok("/v1/chat/completions", body);
    const auto g = JsonGrammar::from_schema(ojson::parse(kPersonSchema), "schema");
    JsonMatcher m(g);
    int positions = 0;
    for (const auto& entry : reply["choices"][0]["logprobs"]["content"]) {
        double mass = 0;
        for (const auto& alt : entry["top_logprobs"]) {
            std::string bytes;
            for (const auto& b : alt["bytes"]) bytes.push_back(char(b.get<int>()));
            JsonMatcher probe = m;
            INFO("an alternative the grammar refuses: '" << bytes << "' after " << positions << " tokens");
            CHECK(probe.feed(bytes));
            mass += std::exp(alt["logprob"].get<double>());
        }
        CHECK(mass <= 1.0 + 1e-4);
        std::string chosen;
        for (const auto& b : entry["bytes"]) chosen.push_back(char(b.get<int>()));
        REQUIRE(m.feed(chosen));
        ++positions;
    }
    CHECK(positions > 5);
}

TEST_CASE("structured output: a draft does not change a constrained answer", "[engine][structured]") {
    StructuredServer plain;
    DraftOptions draft;
    draft.kind = anvil::engine::DraftKind::Ngram;
    draft.ngram = 2;
    draft.tokens = 4;
    StructuredServer speculative(draft);
    const ojson body = quotes_favoured(chat(schema_format(kPersonSchema), 200, 0.0, 5), plain.engine().tokenizer(), 4);
    const json a = plain.post_ok("/v1/chat/completions", body);
    const json b = speculative.post_ok("/v1/chat/completions", body);
    CHECK(a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]);
    CHECK(b["choices"][0]["finish_reason"] == "stop");
    require_person(b["choices"][0]["message"]["content"]);
    // An unconstrained request beside it still speculates.
    const json free = speculative.post_ok("/v1/completions", {{"prompt", "one two one two one two"}, {"max_tokens", 24},
                                                              {"temperature", 0}, {"ignore_eos", true}});
    CHECK(free["usage"]["completion_tokens"] == 24);
    CHECK(speculative.engine().metrics().draft_proposed.load() > 0);
    CHECK(speculative.engine().metrics().constrained_tokens.load() > 0);
}

TEST_CASE("structured output: bad response_format and schemas outside the subset are 400s naming the field",
          "[engine][structured]") {
    StructuredServer server;
    const auto refused = [&](const std::string& format, const std::string& expected) {
        const std::string body = R"({"messages": [{"role": "user", "content": "x"}], "response_format": )" + format + "}";
        auto res = server.post("/v1/chat/completions", body);
        REQUIRE(res);
        INFO(format << " -> " << res->body);
        CHECK(res->status == 400);
        const json error = json::parse(res->body);
        CHECK_THAT(error["error"]["message"].get<std::string>(), Catch::Contains(expected));
        CHECK(error["error"]["type"] == "invalid_request_error");
    };
    refused(R"({"type": "yaml"})", "response_format.type is \"yaml\"; expected text, json_object or json_schema");
    refused(R"("json")", "response_format must be an object with a type");
    refused(R"({"type": "json_schema"})", "response_format.json_schema is required");
    refused(R"({"type": "json_schema", "json_schema": {"name": "x"}})", "response_format.json_schema.schema is required");
    refused(R"({"type": "json_schema", "json_schema": {"schema": {"type": "string", "pattern": "^a"}}})",
            "response_format.json_schema.schema.pattern: this keyword is not supported");
    refused(R"({"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": {"a": {"oneOf": []}}}}})",
            "response_format.json_schema.schema.properties.a.oneOf");
    // The properties' order is the request's, not nlohmann's alphabetical one.
    const std::string body = R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 300, "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "o", "schema": {"type": "object",
        "properties": {"zeta": {"type": "boolean"}, "alpha": {"type": "boolean"}}, "required": ["zeta", "alpha"]}}}})";
    auto res = server.post("/v1/chat/completions", body);
    REQUIRE(res);
    REQUIRE(res->status == 200);
    const std::string content = json::parse(res->body)["choices"][0]["message"]["content"];
    INFO(content);
    REQUIRE(json::accept(content));
    CHECK(content.find("zeta") < content.find("alpha"));
}
