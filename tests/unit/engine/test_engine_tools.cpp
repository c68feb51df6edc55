// Tool calling: each chat family offers tools and writes calls and results its own way; answers
// are parsed back into calls, whole or as they stream; a required or named tool_choice forces a
// call whose arguments follow the tool's schema (random walks through the call grammar always
// parse as a call); and over HTTP, on tiny models of each family, calls come back in OpenAI's
// shape, streamed as OpenAI streams them, with clear 400s for what cannot be honoured.
#include <catch2/catch.hpp>

#include <httplib.h>

#include <random>

#include <nlohmann/json.hpp>

#include "engine/chat_template.hpp"
#include "engine/engine.hpp"
#include "engine/json_grammar.hpp"
#include "engine/make_model.hpp"
#include "engine/server.hpp"
#include "engine/tool_calls.hpp"
#include "test_engine_served.hpp"
#include "test_support.hpp"

using namespace anvil::engine;
using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

ToolRequest weather_tools(ToolChoice choice = ToolChoice::Auto, std::string named = {}) {
    ToolRequest t;
    t.tools.push_back({"get_weather", "The weather in a city.",
                       ojson::parse(R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                        "unit": {"enum": ["C", "F"]}}, "required": ["city"]})")});
    t.tools.push_back({"get_time", "", ojson::parse(R"({"type": "object", "properties": {"zone": {"type": "integer"}},
                                                        "required": ["zone"]})")});
    t.choice = choice;
    t.named = std::move(named);
    return t;
}

const ChatFamily kFamilies[] = {ChatFamily::ChatMl, ChatFamily::Llama3, ChatFamily::Mistral};

}  // namespace

TEST_CASE("tools: each family offers tools and writes calls and results in its own format", "[engine][tools]") {
    const ToolRequest tools = weather_tools();
    const std::vector<ChatMessage> conversation = {
        {"user", "Weather in Paris?", {}, {}},
        {"assistant", "", {{"call_1", "get_weather", R"({"city":"Paris"})"}}, {}},
        {"tool", "18 degrees", {}, "call_1"},
    };
    const std::string qwen = ChatTemplate(ChatFamily::ChatMl, "", "<|im_end|>", "You are Qwen.").render(conversation, &tools);
    CHECK(qwen.rfind("<|im_start|>system\nYou are Qwen.\n\n# Tools\n", 0) == 0);
    CHECK_THAT(qwen, Catch::Contains("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                                     "\"description\": \"The weather in a city.\", \"parameters\": {\"type\": \"object\", "
                                     "\"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 10}"));
    CHECK_THAT(qwen, Catch::Contains("<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                     "{\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"));
    CHECK_THAT(qwen, Catch::EndsWith("<|im_start|>user\n<tool_response>\n18 degrees\n</tool_response><|im_end|>\n"
                                     "<|im_start|>assistant\n"));

    const std::string llama = ChatTemplate(ChatFamily::Llama3, "<|begin_of_text|>", "<|eot_id|>").render(conversation, &tools);
    CHECK_THAT(llama, Catch::Contains("<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions"));
    CHECK_THAT(llama, Catch::Contains("\"name\": \"get_weather\",\n"));  // indented, as tojson(indent=4) writes it
    CHECK_THAT(llama, Catch::Contains("}\n\nWeather in Paris?<|eot_id|>"));
    CHECK_THAT(llama, Catch::Contains("<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", "
                                      "\"parameters\": {\"city\": \"Paris\"}}<|eot_id|>"));
    CHECK_THAT(llama, Catch::EndsWith("<|start_header_id|>ipython<|end_header_id|>\n\n18 degrees<|eot_id|>"
                                      "<|start_header_id|>assistant<|end_header_id|>\n\n"));

    const std::string mistral = ChatTemplate(ChatFamily::Mistral, "<s>", "</s>").render(conversation, &tools);
    CHECK(mistral.rfind("<s>[AVAILABLE_TOOLS] [{\"type\": \"function\"", 0) == 0);
    CHECK_THAT(mistral, Catch::Contains("[/AVAILABLE_TOOLS][INST] Weather in Paris? [/INST][TOOL_CALLS] [{\"name\": "
                                        "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]</s>"));
    CHECK_THAT(mistral, Catch::EndsWith("[TOOL_RESULTS] {\"content\":\"18 degrees\"}[/TOOL_RESULTS]"));

    // tool_choice none: the tools are not offered.
    ToolRequest none = tools;
    none.choice = ToolChoice::None;
    CHECK(ChatTemplate(ChatFamily::ChatMl, "", "", "").render({{"user", "hi", {}, {}}}, &none) ==
          "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    CHECK_THROWS_WITH(ChatTemplate(ChatFamily::Mistral, "<s>", "</s>").render({{"user", "a", {}, {}}, {"tool", "x", {}, "c"}}, &tools),
                      Catch::Contains("tool results only after an assistant's tool calls"));
}

TEST_CASE("tools: answers are parsed into calls to known tools, and text stays text", "[engine][tools]") {
    const auto tools = weather_tools().tools;
    auto qwen = parse_calls(ChatFamily::ChatMl,
                            "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n"
                            "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": 2}}\n</tool_call>",
                            tools);
    REQUIRE(qwen.calls.size() == 2);
    CHECK(qwen.calls[0].name == "get_weather");
    CHECK(json::parse(qwen.calls[0].arguments) == json{{"city", "Oslo"}});
    CHECK(qwen.calls[1].name == "get_time");
    CHECK(qwen.content == "Let me look.");
    CHECK(qwen.calls[0].id.rfind("call_", 0) == 0);
    CHECK(qwen.calls[0].id != qwen.calls[1].id);

    auto llama = parse_calls(ChatFamily::Llama3, " {\"name\": \"get_time\", \"parameters\": {\"zone\": 1}}", tools);
    REQUIRE(llama.calls.size() == 1);
    CHECK(llama.content.empty());
    auto mistral = parse_calls(ChatFamily::Mistral, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]", tools);
    REQUIRE(mistral.calls.size() == 1);
    CHECK(mistral.calls[0].name == "get_weather");

    // Unknown functions, arguments that are no object and broken JSON are text.
    CHECK(parse_calls(ChatFamily::ChatMl, "<tool_call>\n{\"name\": \"rm\", \"arguments\": {}}\n</tool_call>", tools).calls.empty());
    CHECK(parse_calls(ChatFamily::Llama3, "{\"name\": \"get_time\", \"parameters\": 3}", tools).calls.empty());
    CHECK(parse_calls(ChatFamily::Mistral, "[TOOL_CALLS] [{\"name\": ", tools).content == "[TOOL_CALLS] [{\"name\": ");
    CHECK(parse_calls(ChatFamily::Llama3, "{\"a\": 1}", tools).content == "{\"a\": 1}");
}

TEST_CASE("tools: streamed text passes until a call may begin: the calls come out as the whole answer's", "[engine][tools]") {
    const auto tools = weather_tools().tools;
    const std::vector<std::pair<ChatFamily, std::string>> answers = {
        {ChatFamily::ChatMl, "Checking <tool< now.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"},
        {ChatFamily::ChatMl, "No call here, just <tool text."},
        {ChatFamily::Llama3, "  {\"name\": \"get_time\", \"parameters\": {\"zone\": 1}}"},
        {ChatFamily::Llama3, "Plain {text} answer."},
        {ChatFamily::Mistral, "[TOOL_CALLS] [{\"name\": \"get_time\", \"arguments\": {\"zone\": 3}}]"},
        {ChatFamily::Mistral, "[TOOL a bracket, not a call"},
    };
    std::mt19937 rng(3);
    for (const auto& [family, answer] : answers)
        for (int split = 0; split < 20; ++split) {
            INFO(answer << " split " << split);
            ToolCallStream stream(family, &tools);
            std::string sent;
            for (size_t at = 0; at < answer.size();) {
                const size_t n = 1 + rng() % 5;
                sent += stream.push(answer.substr(at, n));
                at += n;
            }
            const ParsedAnswer rest = stream.finish();
            const ParsedAnswer whole = parse_calls(family, answer, tools);
            REQUIRE(rest.calls.size() == whole.calls.size());
            for (size_t i = 0; i < whole.calls.size(); ++i) {
                CHECK(rest.calls[i].name == whole.calls[i].name);
                CHECK(rest.calls[i].arguments == whole.calls[i].arguments);
            }
            if (whole.calls.empty()) {
                CHECK(sent + rest.content == answer);  // all of it text, none lost or doubled
            } else {
                // What came before the call went out as it came; the call itself never did.
                CHECK(sent == (family == ChatFamily::ChatMl ? "Checking <tool< now.\n" : ""));
                CHECK(rest.content.empty());
            }
        }
}

TEST_CASE("tools: a required or named call is forced: random walks through its grammar are calls with valid arguments",
          "[engine][tools]") {
    std::mt19937 rng(11);
    for (ChatFamily family : kFamilies)
        for (const auto& request : {weather_tools(ToolChoice::Required), weather_tools(ToolChoice::Named, "get_time")}) {
            const auto g = call_grammar(family, request);
            std::map<std::string, int> names;
            for (int walk = 0; walk < 60; ++walk) {
                JsonMatcher m(g);
                std::string text;
                while (!m.done() && text.size() < 3000) {
                    std::vector<uint8_t> options;
                    for (int b = 0; b < 256; ++b) {
                        JsonMatcher probe = m;
                        if (probe.feed(uint8_t(b))) options.push_back(uint8_t(b));
                    }
                    REQUIRE_FALSE(options.empty());
                    // Favour closing a value so that walks end.
                    std::vector<uint8_t> closing;
                    for (uint8_t b : options)
                        if (b == '"' || b == '}' || b == ']' || b == ',') closing.push_back(b);
                    const auto& pool = !closing.empty() && rng() % 3 == 0 ? closing : options;
                    const uint8_t b = pool[rng() % pool.size()];
                    REQUIRE(m.feed(b));
                    text.push_back(char(b));
                }
                if (!m.done()) continue;
                INFO(chat_family_name(family) << ": " << text);
                const ParsedAnswer parsed = parse_calls(family, text, request.tools);
                REQUIRE(parsed.calls.size() == 1);
                const json arguments = json::parse(parsed.calls[0].arguments);
                if (parsed.calls[0].name == "get_weather") {
                    REQUIRE(arguments.contains("city"));
                    CHECK(arguments["city"].get<std::string>().size() <= 40);
                } else {
                    REQUIRE(arguments["zone"].is_number_integer());
                }
                ++names[parsed.calls[0].name];
            }
            if (request.choice == ToolChoice::Named) CHECK(names.count("get_weather") == 0);
            else CHECK(names.size() == 2);
        }
    // A parameters schema outside the subset cannot be forced.
    ToolRequest bad = weather_tools(ToolChoice::Required);
    bad.tools[1].parameters = ojson::parse(R"({"type": "object", "properties": {"zone": {"type": "integer", "minimum": 0}}})");
    CHECK_THROWS_WITH(call_grammar(ChatFamily::ChatMl, bad), Catch::Contains("tools[1].function.parameters.properties.zone.minimum"));
}

namespace {

class ToolServer {
public:
    // The tools' prompt text is long in the tiny model's 300-token vocabulary: 2048 positions.
    explicit ToolServer(const char* arch) {
        EngineOptions options;
        options.max_context = 2048;
        served_ = anvil::test::engine::serve_tiny(dir_ / "model", options, arch, 2048);
    }
    httplib::Result post(const ojson& body) const {
        return served_->client().Post("/v1/chat/completions", body.dump(), "application/json");
    }

private:
    anvil::test::TempDir dir_;
    std::unique_ptr<anvil::test::engine::InProcessServer> served_;
};

ojson tools_json() {
    return ojson::parse(R"([{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
        "properties": {"zone": {"type": "integer"}}, "required": ["zone"]}}}])");
}

ojson tool_body(const ojson& choice, int seed) {
    return {{"messages", ojson::array({{{"role", "user"}, {"content", "What is the weather in Paris?"}}})},
            {"tools", tools_json()},
            {"tool_choice", choice},
            {"max_tokens", 120},
            {"seed", seed}};
}

}  // namespace

TEST_CASE("tools over HTTP: forced calls come back as tool_calls, streamed as OpenAI streams them", "[engine][tools]") {
    for (const char* arch : {"qwen2", "llama", "mistral"}) {
        ToolServer server(arch);
        int calls = 0;
        for (int seed = 0; seed < 3; ++seed)
            for (const ojson& choice : {ojson("required"), ojson{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}) {
                auto res = server.post(tool_body(choice, seed));
                REQUIRE(res);
                INFO(arch << " " << choice.dump() << " -> " << res->body);
                REQUIRE(res->status == 200);
                const json reply = json::parse(res->body);
                const json& c = reply["choices"][0];
                if (c["finish_reason"] == "length") continue;  // a random model's integer or string ran long
                REQUIRE(c["finish_reason"] == "tool_calls");
                const json& message = c["message"];
                CHECK(message["content"].is_null());
                REQUIRE(message["tool_calls"].size() == 1);
                const json& call = message["tool_calls"][0];
                CHECK(call["type"] == "function");
                CHECK(call["id"].get<std::string>().rfind("call_", 0) == 0);
                const std::string name = call["function"]["name"];
                if (choice.is_object()) CHECK(name == "get_weather");
                const json arguments = json::parse(call["function"]["arguments"].get<std::string>());
                CHECK((name == "get_weather" ? arguments["city"].is_string() : arguments["zone"].is_number_integer()));
                ++calls;

                // Streamed: the same call, as a head delta (id, type, name) and an arguments delta.
                ojson streamed = tool_body(choice, seed);
                streamed["stream"] = true;
                auto s = server.post(streamed);
                REQUIRE(s);
                std::string id, streamed_name, arguments_text, finish;
                for (const auto& e : anvil::test::engine::sse_events(s->body)) {
                    if (e == "[DONE]") continue;
                    const json chunk = json::parse(e);
                    const json& sc = chunk["choices"][0];
                    if (sc["finish_reason"].is_string()) finish = sc["finish_reason"];
                    if (!sc["delta"].contains("tool_calls")) continue;
                    const json& d = sc["delta"]["tool_calls"][0];
                    CHECK(d["index"] == 0);
                    if (d.contains("id")) id = d["id"], streamed_name = d["function"]["name"];
                    arguments_text += d["function"]["arguments"].get<std::string>();
                }
                CHECK(finish == "tool_calls");
                CHECK(id.rfind("call_", 0) == 0);
                CHECK(streamed_name == name);
                CHECK(arguments_text == call["function"]["arguments"]);
            }
        CHECK(calls >= 3);

        // The conversation goes on with the call and its result.
        const ojson followup = {
            {"messages", ojson::array({{{"role", "user"}, {"content", "Weather in Paris?"}},
                                       {{"role", "assistant"}, {"content", nullptr},
                                        {"tool_calls", ojson::array({{{"id", "call_1"}, {"type", "function"},
                                                                      {"function", {{"name", "get_weather"},
                                                                                    {"arguments", "{\"city\": \"Paris\"}"}}}}})}},
                                       {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "18 C"}}})},
            {"tools", tools_json()},
            {"max_tokens", 8}};
        auto res = server.post(followup);
        REQUIRE(res);
        INFO(res->body);
        CHECK(res->status == 200);
    }
}

TEST_CASE("tools over HTTP: what cannot be honoured is a 400 naming the field", "[engine][tools]") {
    ToolServer server("qwen2");
    const auto refused = [&](ojson body, const std::string& expected) {
        auto res = server.post(body);
        REQUIRE(res);
        INFO(body.dump() << " -> " << res->body);
        CHECK(res->status == 400);
        CHECK_THAT(json::parse(res->body)["error"]["message"].get<std::string>(), Catch::Contains(expected));
    };
    ojson body = tool_body("required", 1);
    body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_stock"}}}};
    refused(body, "tool_choice.function.name \"get_stock\" is not among the tools offered");
    body = tool_body("sometimes", 1);
    refused(body, "tool_choice is \"sometimes\"");
    body = tool_body("required", 1);
    body.erase("tools");
    refused(body, "tool_choice needs tools to choose from");
    body = tool_body("required", 1);
    body["tools"][0]["function"]["name"] = "get weather";
    refused(body, "tools[0].function.name \"get weather\" must be 1 to 64 letters");
    body = tool_body("required", 1);
    body["response_format"] = {{"type", "json_object"}};
    refused(body, "cannot both constrain one answer");
    body = tool_body("required", 1);
    body["tools"][1]["function"]["parameters"]["properties"]["zone"]["minimum"] = 0;
    refused(body, "tools[1].function.parameters.properties.zone.minimum: this keyword is not supported");
    body = tool_body("auto", 1);
    body["messages"].push_back({{"role", "tool"}, {"content", "x"}});
    refused(body, "messages[1].tool_call_id is required");
}
