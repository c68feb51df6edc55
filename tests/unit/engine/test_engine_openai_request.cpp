// Reading OpenAI request bodies: logit_bias and token-id prompts, and the 400 messages that name
// the field a client got wrong. Whether an id exists in the vocabulary is the engine's to say
// (test_engine_logit_bias.cpp); the parser refuses what can never be a token id.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "engine/engine.hpp"
#include "engine/openai_request.hpp"

using namespace anvil::engine;
using nlohmann::json;

namespace {

json completion(json extra) {
    json body = {{"prompt", "hi"}};
    body.update(extra);
    return body;
}

json chat(json extra) {
    json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
    body.update(extra);
    return body;
}

std::string refusal(const json& body) {
    try {
        parse_completion_request(body);
    } catch (const InvalidRequest& e) {
        return e.what();
    }
    FAIL("the request was accepted: " << body.dump());
    return {};
}

}  // namespace

TEST_CASE("logit_bias is read into the sampling parameters, sorted by token id", "[engine][request]") {
    const json bias = {{"17", -100}, {"3", 2.5}, {"0", 100}};
    for (const ParsedRequest& r : {parse_completion_request(completion({{"logit_bias", bias}})),
                                   parse_chat_request(chat({{"logit_bias", bias}}))}) {
        REQUIRE(r.params.logit_bias.size() == 3);
        CHECK(r.params.logit_bias[0].token == 0);
        CHECK(r.params.logit_bias[0].bias == 100.0f);
        CHECK(r.params.logit_bias[1].token == 3);
        CHECK(r.params.logit_bias[1].bias == 2.5f);
        CHECK(r.params.logit_bias[2].token == 17);
        CHECK(r.params.logit_bias[2].bias == -100.0f);
    }
}

TEST_CASE("no logit_bias, null or an empty object means no bias", "[engine][request]") {
    CHECK(parse_completion_request(completion(json::object())).params.logit_bias.empty());
    CHECK(parse_completion_request(completion({{"logit_bias", nullptr}})).params.logit_bias.empty());
    CHECK(parse_chat_request(chat({{"logit_bias", json::object()}})).params.logit_bias.empty());
}

TEST_CASE("a malformed logit_bias is refused with a message naming it", "[engine][request]") {
    CHECK_THAT(refusal(completion({{"logit_bias", json::array({1, 2})}})),
               Catch::StartsWith("logit_bias must be an object mapping token ids"));
    CHECK_THAT(refusal(completion({{"logit_bias", {{"abc", 1}}}})),
               Catch::Equals("logit_bias: key \"abc\" is not a token id (a decimal number such as \"50256\")"));
    CHECK_THAT(refusal(completion({{"logit_bias", {{"-1", 1}}}})), Catch::Contains("key \"-1\" is not a token id"));
    CHECK_THAT(refusal(completion({{"logit_bias", {{"", 1}}}})), Catch::Contains("key \"\" is not a token id"));
    CHECK_THAT(refusal(completion({{"logit_bias", {{"1.5", 1}}}})), Catch::Contains("key \"1.5\" is not a token id"));
    CHECK_THAT(refusal(completion({{"logit_bias", {{"99999999999999999999999", 1}}}})),
               Catch::Equals("logit_bias: token id 99999999999999999999999 does not exist"));
    CHECK_THAT(refusal(completion({{"logit_bias", {{"2147483648", 1}}}})), Catch::Contains("token id 2147483648 does not exist"));
    CHECK_THAT(refusal(completion({{"logit_bias", {{"5", "high"}}}})),
               Catch::Equals("logit_bias: the bias of token id 5 must be a number from -100 to 100"));
    CHECK_THAT(refusal(completion({{"logit_bias", {{"7", 1}, {"007", 2}}}})),
               Catch::Equals("logit_bias: token id 7 appears more than once"));
}

TEST_CASE("a bias outside -100..100 is refused: the bounds themselves are accepted", "[engine][request]") {
    CHECK_THAT(refusal(completion({{"logit_bias", {{"5", 100.5}}}})),
               Catch::Equals("logit_bias: the bias of token id 5 is 100.5; it must be from -100 to 100"));
    CHECK_THAT(refusal(completion({{"logit_bias", {{"5", -101}}}})), Catch::Contains("must be from -100 to 100"));
    CHECK_THROWS_AS(parse_chat_request(chat({{"logit_bias", {{"5", 1000}}}})), InvalidRequest);
    CHECK(parse_completion_request(completion({{"logit_bias", {{"5", -100}, {"6", 100}}}})).params.logit_bias.size() == 2);
}

TEST_CASE("a token-id prompt is read whole: ids that can never exist are refused, never wrapped", "[engine][request]") {
    const ParsedRequest ok = parse_completion_request({{"prompt", {0, 5, 2147483647}}});
    CHECK(ok.prompt_tokens == std::vector<int32_t>{0, 5, 2147483647});
    // 2^32 + 5 read as int32 would be token 5.
    CHECK_THAT(refusal({{"prompt", {1, 4294967301LL}}}), Catch::Equals("prompt: token id 4294967301 does not exist"));
    CHECK_THAT(refusal({{"prompt", {1, -1}}}), Catch::Equals("prompt: token id -1 does not exist"));
    // As read from a body's text, where JSON numbers are unsigned unless negative.
    CHECK(parse_completion_request(json::parse(R"({"prompt": [0, 7]})")).prompt_tokens == std::vector<int32_t>{0, 7});
    CHECK_THAT(refusal(json::parse(R"({"prompt": [0, 4294967301]})")), Catch::Equals("prompt: token id 4294967301 does not exist"));
    CHECK_THAT(refusal(json::parse(R"({"prompt": [0, -3]})")), Catch::Equals("prompt: token id -3 does not exist"));
    CHECK_THAT(refusal({{"prompt", {1, 2.5}}}), Catch::Contains("must be a string or a list of token ids"));
}
