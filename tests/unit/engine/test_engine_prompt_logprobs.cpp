// Prompt logprobs (completions with echo and logprobs) against a real engine over HTTP: every
// prompt token but the first gets the logprob a whole-sequence forward pass gives it, in chunks
// of the engine's prompt-logit rows, beside other prompts competing for them, streamed or not,
// and exactly once even when the sequence is preempted and recomputed.
#include <catch2/catch.hpp>

#include <httplib.h>

#include <cmath>
#include <future>

#include <nlohmann/json.hpp>

#include "engine/engine.hpp"
#include "engine/make_model.hpp"
#include "engine/server.hpp"
#include "engine/unicode.hpp"
#include "test_engine_helpers.hpp"
#include "test_engine_served.hpp"
#include "test_support.hpp"

using namespace anvil::engine;
using nlohmann::json;

namespace {

// log softmax(row)[token], in double precision.
double reference_logprob(const float* row, int vocab, int32_t token) {
    double largest = row[0];
    for (int i = 1; i < vocab; ++i) largest = std::max(largest, double(row[i]));
    double sum = 0;
    for (int i = 0; i < vocab; ++i) sum += std::exp(double(row[i]) - largest);
    return double(row[token]) - largest - std::log(sum);
}

class LogprobsEngine {
public:
    explicit LogprobsEngine(int kv_blocks = 0) {
        EngineOptions options;
        options.max_context = 256;
        options.kv_blocks = kv_blocks;
        served_ = anvil::test::engine::serve_tiny(dir_ / "model", options);
    }
    std::string post(const json& body) const { return checked(body, post_unchecked(body)); }
    // Safe off the test's thread: no Catch assertion (they are not thread-safe), only HTTP.
    std::pair<int, std::string> post_unchecked(const json& body) const {
        auto res = served_->client().Post("/v1/completions", body.dump(), "application/json");
        return res ? std::make_pair(res->status, res->body) : std::make_pair(0, std::string());
    }
    static std::string checked(const json& body, const std::pair<int, std::string>& reply) {
        INFO(body.dump() << " -> " << reply.second);
        REQUIRE(reply.first == 200);
        return reply.second;
    }
    const std::filesystem::path model() const { return dir_ / "model"; }
    Engine& engine() { return served_->engine(); }

private:
    anvil::test::TempDir dir_;
    std::unique_ptr<anvil::test::engine::InProcessServer> served_;
};

// Checks a choice's logprobs against the whole-sequence reference: the first `prompt.size()`
// entries are the prompt's, the first of them null, then `generated` entries of the answer.
void check_prompt_logprobs(const json& logprobs, const std::vector<int32_t>& prompt, const std::vector<float>& reference,
                           const Tokenizer& tokenizer, int vocab, size_t generated, size_t echo_length) {
    REQUIRE(logprobs["tokens"].size() == prompt.size() + generated);
    REQUIRE(logprobs["token_logprobs"].size() == prompt.size() + generated);
    CHECK(logprobs["token_logprobs"][0].is_null());
    CHECK(logprobs["top_logprobs"][0].is_null());
    CHECK(logprobs["text_offset"][0] == 0);
    for (size_t k = 0; k < prompt.size(); ++k) {
        INFO("prompt token " << k);
        CHECK(logprobs["tokens"][k] == sanitize_utf8(tokenizer.token_bytes(prompt[k])));
        if (k == 0) continue;
        const double expected = reference_logprob(reference.data() + (k - 1) * size_t(vocab), vocab, prompt[k]);
        CHECK(logprobs["token_logprobs"][k].get<double>() == Approx(expected).margin(2e-4));
        const json& top = logprobs["top_logprobs"][k];
        // Keyed by text, as OpenAI's legacy shape is: pieces of one character's bytes share a key.
        CHECK(top.size() >= 1);
        CHECK(top.size() <= 3);
        double best = -1e30;
        for (const auto& [_, lp] : top.items()) best = std::max(best, lp.get<double>());
        CHECK(best >= logprobs["token_logprobs"][k].get<double>() - 1e-6);
        CHECK(logprobs["text_offset"][k].get<size_t>() >= logprobs["text_offset"][k - 1].get<size_t>());
    }
    // The answer's tokens follow the echoed prompt in the text.
    CHECK(logprobs["text_offset"][prompt.size()] == echo_length);
    for (size_t k = prompt.size(); k < prompt.size() + generated; ++k) CHECK(logprobs["token_logprobs"][k].is_number());
}

json body_for(const std::vector<int32_t>& prompt, int max_tokens) {
    return {{"prompt", prompt}, {"echo", true}, {"logprobs", 3}, {"max_tokens", max_tokens}, {"temperature", 0},
            {"ignore_eos", true}};
}

}  // namespace

TEST_CASE("echo with logprobs gives every prompt token the logprob a whole forward pass gives it",
          "[engine][prompt_logprobs]") {
    LogprobsEngine served;
    const auto model = anvil::test::engine::load_model(served.model(), WeightFormat::Stored);
    const int vocab = model.config.vocab_size;
    const Tokenizer& tokenizer = served.engine().tokenizer();
    // Longer than the engine's prompt-logit rows a step (32): the prompt is fed in several chunks.
    const std::vector<int32_t> prompt = anvil::test::engine::token_sequence(100, vocab, 3);
    const auto reference = anvil::test::engine::run_sequences(model, {prompt}, 0)[0];

    const json reply = json::parse(served.post(body_for(prompt, 4)));
    const json& choice = reply["choices"][0];
    const std::string echo = sanitize_utf8(tokenizer.decode(prompt, false));
    CHECK(choice["text"].get<std::string>().rfind(echo, 0) == 0);
    check_prompt_logprobs(choice["logprobs"], prompt, reference, tokenizer, vocab, 4, echo.size());
    CHECK(reply["usage"]["prompt_tokens"] == 100);

    // Streamed: the same entries, the prompt's in chunks ahead of the answer's.
    json stream_body = body_for(prompt, 4);
    stream_body["stream"] = true;
    json merged = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
                   {"text_offset", json::array()}};
    for (const auto& e : anvil::test::engine::sse_events(served.post(stream_body))) {
        if (e == "[DONE]") continue;
        const json chunk = json::parse(e);
        const json& l = chunk["choices"][0]["logprobs"];
        if (l.is_null()) continue;
        for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
            for (const auto& v : l[key]) merged[key].push_back(v);
    }
    CHECK(merged == choice["logprobs"]);

    // A one-token prompt: only the null entry, then the answer.
    const json one = json::parse(served.post(body_for({prompt[0]}, 2)));
    const json& l = one["choices"][0]["logprobs"];
    REQUIRE(l["tokens"].size() == 3);
    CHECK(l["token_logprobs"][0].is_null());
    CHECK(l["token_logprobs"][1].is_number());

    // echo without logprobs and logprobs without echo are as before: no prompt entries.
    json plain = body_for(prompt, 4);
    plain["echo"] = false;
    CHECK(json::parse(served.post(plain))["choices"][0]["logprobs"]["tokens"].size() == 4);
}

TEST_CASE("prompt logprobs are reported once, beside other prompts and across preemption", "[engine][prompt_logprobs]") {
    // 14 blocks of 16: two 100-token prompts are admitted together (7 blocks each), and the
    // newer one is preempted when the older one's answer needs a block, then recomputed.
    LogprobsEngine served(14);
    const auto model = anvil::test::engine::load_model(served.model(), WeightFormat::Stored);
    const int vocab = model.config.vocab_size;
    const Tokenizer& tokenizer = served.engine().tokenizer();
    std::vector<std::vector<int32_t>> prompts;
    for (int salt = 10; salt < 13; ++salt) prompts.push_back(anvil::test::engine::token_sequence(100, vocab, salt));
    const auto reference = anvil::test::engine::run_sequences(model, prompts, 0);
    // On a loaded machine the three requests can arrive one after another and never meet in the
    // cache: they are sent again (each round checked whole) until a round has preempted one.
    for (int round = 0; round < 5 && served.engine().metrics().preemptions.load() == 0; ++round) {
        INFO("round " << round);
        std::vector<std::future<std::pair<int, std::string>>> replies;
        for (const auto& p : prompts)
            replies.push_back(std::async(std::launch::async, [&, p] { return served.post_unchecked(body_for(p, 40)); }));
        for (size_t i = 0; i < prompts.size(); ++i) {
            const json reply = json::parse(LogprobsEngine::checked(body_for(prompts[i], 40), replies[i].get()));
            INFO("prompt " << i);
            const std::string echo = sanitize_utf8(tokenizer.decode(prompts[i], false));
            check_prompt_logprobs(reply["choices"][0]["logprobs"], prompts[i], reference[i], tokenizer, vocab, 40, echo.size());
        }
    }
    CHECK(served.engine().metrics().preemptions.load() > 0);
}
