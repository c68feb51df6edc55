// The hard gates: identity, smoke, json, determinism, tools, needle. What each checks, and why
// the json gate checks shapes rather than content on engines that do not constrain output, is in
// docs/QUALIFICATION.md and qualification.hpp.
#include "daemon/qualify/gates.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include <spdlog/spdlog.h>

namespace anvil::qualify::detail {

using nlohmann::json;
using Attempt = std::function<std::optional<std::string>(int attempt)>;

namespace {

GateOutcome run_attempts(const std::string& gate, const Plan& plan, const Attempt& attempt) {
    GateOutcome g;
    g.gate = gate;
    g.attempts = std::max(plan.attempts, 1);
    for (int i = 0; i < g.attempts; ++i) {
        if (auto why = attempt(i)) g.reasons.push_back("attempt " + std::to_string(i + 1) + ": " + *why);
        else ++g.passed;
    }
    // A small tolerance so that 2/3 against a configured 0.6667 does not fail on rounding.
    g.pass = double(g.passed) / double(g.attempts) + 1e-9 >= plan.min_pass_rate;
    spdlog::info("qualify: gate {} {} ({}/{})", gate, g.pass ? "passed" : "failed", g.passed, g.attempts);
    return g;
}

std::string quoted(const std::string& text, std::size_t limit = 80) {
    return "'" + (text.size() > limit ? text.substr(0, limit) + "…" : text) + "'";
}

// The checks every whole (unstreamed) chat reply must pass: OpenAI's shape, a text answer, a
// finish reason of stop or length and token counts that agree with it. Returns the reply.
std::optional<std::string> check_chat_reply(const Exchange& x, int max_tokens, json& reply) {
    if (!x.ok()) return x.failure();
    auto parsed = x.json();
    if (!parsed) return "the response body is not JSON: " + quoted(x.body);
    reply = *parsed;
    if (!reply.is_object() || !reply.contains("choices") || !reply["choices"].is_array() || reply["choices"].empty())
        return "the response has no choices: " + quoted(reply.dump());
    const json& choice = reply["choices"][0];
    if (!choice.is_object() || !choice.contains("message") || !choice["message"].is_object() ||
        !choice["message"].contains("content") || !choice["message"]["content"].is_string())
        return "choices[0].message.content is not text: " + quoted(choice.dump());
    const std::string finish = reply_finish_reason(reply);
    if (finish != "stop" && finish != "length") return "finish_reason is " + quoted(finish) + ", expected stop or length";
    if (auto completion = usage_of(reply, "completion_tokens")) {
        if (*completion > max_tokens)
            return "usage.completion_tokens " + std::to_string(*completion) + " exceeds max_tokens " + std::to_string(max_tokens);
        if (finish == "length" && *completion != max_tokens)
            return "finish_reason length after " + std::to_string(*completion) + " tokens, max_tokens was " + std::to_string(max_tokens);
    }
    return std::nullopt;
}

const char* const kSmokePrompts[] = {
    "Say hello in one short sentence.",
    "Name three colours.",
    "What is two plus two?",
};

const char* const kDeterminismPrompts[] = {
    "Write one sentence about the sea.",
    "Describe a kitchen table in a few words.",
    "Count from one to five.",
    "Give a title for a story about a lighthouse.",
};

}  // namespace

GateOutcome identity_gate(RunContext& run) {
    return run_attempts("identity", run.plan, [&](int) -> std::optional<std::string> {
        if (run.target.model.empty()) return "the recipe promises no served model id";
        const Exchange x = run.client.get("identity", "/v1/models");
        if (!x.ok()) return x.failure();
        const auto models = x.json();
        if (!models || !models->is_object() || !models->contains("data") || !(*models)["data"].is_array())
            return "GET /v1/models: no \"data\" list in " + quoted(x.body);
        std::vector<std::string> ids;
        for (const auto& m : (*models)["data"]) {
            if (!m.is_object() || !m.contains("id") || !m["id"].is_string()) continue;
            ids.push_back(m["id"]);
            if (ids.back() != run.target.model) continue;
            if (m.contains("max_model_len") && m["max_model_len"].is_number_integer())
                run.max_model_len = m["max_model_len"].get<long long>();
            return std::nullopt;
        }
        std::string listed;
        for (const auto& id : ids) listed += (listed.empty() ? "" : ", ") + quoted(id);
        return "GET /v1/models lists [" + listed + "] but not " + quoted(run.target.model);
    });
}

GateOutcome smoke_gate(RunContext& run) {
    return run_attempts("smoke", run.plan, [&](int attempt) -> std::optional<std::string> {
        const std::string prompt = kSmokePrompts[attempt % std::size(kSmokePrompts)];
        json reply;
        const int max_tokens = std::max(run.plan.max_tokens, 2);
        if (auto why = check_chat_reply(run.client.post("smoke", "/v1/chat/completions", chat_body(run, prompt, max_tokens)),
                                         max_tokens, reply))
            return why;
        if (reply_text(reply).empty()) return "the answer is empty (finish_reason " + reply_finish_reason(reply) + ")";
        // The same greedy request cut at one token must say it stopped for length: its first token
        // was not the end (the answer above is not empty), so only the limit can have ended it.
        json cut;
        if (auto why = check_chat_reply(run.client.post("smoke", "/v1/chat/completions", chat_body(run, prompt, 1)), 1, cut))
            return "max_tokens 1: " + *why;
        if (reply_finish_reason(cut) != "length")
            return "max_tokens 1 ended with finish_reason " + quoted(reply_finish_reason(cut)) + ", expected length";
        return std::nullopt;
    });
}

namespace {

// What the constrained json gate asks for: a person whose every field is bounded, so that an
// engine that bounds whitespace and digits as llama.cpp's grammars and anvil-engine do ends any
// model's answer within kConstrainedJsonMaxTokens (9 gaps of at most 21 bytes, 20 characters of
// at most 6 bytes, 17 digits and the punctuation: under 400 bytes, so under 400 tokens).
constexpr int kConstrainedJsonMaxTokens = 400;
const json& person_schema() {
    static const json schema = {{"type", "object"},
                                {"properties", {{"name", {{"type", "string"}, {"maxLength", 20}}}, {"age", {{"type", "integer"}}}}},
                                {"required", {"name", "age"}},
                                {"additionalProperties", false}};
    return schema;
}

// Why `text` is not the person the schema describes, or nothing when it is.
std::optional<std::string> not_a_person(const std::string& text) {
    if (!json::accept(text)) return "the answer is not JSON: " + quoted(text);
    const json v = json::parse(text);
    if (!v.is_object() || v.size() != 2 || !v.contains("name") || !v.contains("age"))
        return "the answer is not an object with exactly the keys name and age: " + quoted(text);
    if (!v["name"].is_string()) return "name is not a string: " + quoted(text);
    size_t characters = 0;
    for (unsigned char c : v["name"].get<std::string>()) characters += (c & 0xC0) != 0x80;
    if (characters > 20) return "name is longer than the schema's maxLength 20: " + quoted(text);
    if (!v["age"].is_number_integer()) return "age is not an integer: " + quoted(text);
    return std::nullopt;
}

}  // namespace

GateOutcome json_gate(RunContext& run) {
    const std::string prompt =
        "Reply with a JSON object with the keys \"name\" (a string) and \"age\" (a number) describing a person.";
    // An engine that constrains output is asked for the schema and held to it; any other is asked
    // for json_object and held to OpenAI's shapes only.
    const bool constrained = run.plan.constrained_json;
    const int max_tokens = constrained ? std::max(run.plan.max_tokens, kConstrainedJsonMaxTokens) : run.plan.max_tokens;
    return run_attempts("json", run.plan, [&](int) -> std::optional<std::string> {
        json body = chat_body(run, prompt, max_tokens);
        body["response_format"] = constrained ? json{{"type", "json_schema"},
                                                     {"json_schema", {{"name", "person"}, {"strict", true}, {"schema", person_schema()}}}}
                                              : json{{"type", "json_object"}};
        json reply;
        if (auto why = check_chat_reply(run.client.post("json", "/v1/chat/completions", body), max_tokens, reply))
            return why;
        if (reply.value("object", "") != "chat.completion") return "object is " + quoted(reply.value("object", "")) + ", expected chat.completion";
        if (!usage_of(reply, "prompt_tokens") || !usage_of(reply, "completion_tokens"))
            return "usage lacks prompt_tokens or completion_tokens";
        const std::string content = reply_text(reply);
        const bool content_is_json = json::accept(content);
        run.journal.note("json", std::string("the answer ") + (content_is_json ? "parses" : "does not parse") + " as JSON");
        if (constrained)
            if (auto why = not_a_person(content)) return why;

        // Streamed: every chunk must be a JSON chat.completion.chunk, and the stream must end.
        body["stream"] = true;
        body["stream_options"] = {{"include_usage", true}};
        const Exchange streamed = run.client.post("json", "/v1/chat/completions", body);
        if (!streamed.ok()) return "stream: " + streamed.failure();
        int chunks = 0;
        for (const auto& payload : streamed.events) {
            if (payload == "[DONE]") continue;
            json chunk;
            try {
                chunk = json::parse(payload);
            } catch (const json::exception&) {
                return "stream: a chunk is not JSON: " + quoted(payload);
            }
            if (!chunk.is_object() || chunk.value("object", "") != "chat.completion.chunk" || !chunk.contains("choices") ||
                !chunk["choices"].is_array())
                return "stream: a chunk is not a chat.completion.chunk: " + quoted(payload);
            for (const auto& choice : chunk["choices"])
                if (!choice.is_object() || !choice.contains("delta") || !choice["delta"].is_object())
                    return "stream: a choice has no delta: " + quoted(payload);
            ++chunks;
        }
        const StreamSummary s = summarize_stream(streamed);
        if (!s.error.empty()) return "stream: " + s.error;
        if (!s.done) return "stream: did not end with [DONE]";
        if (chunks == 0) return "stream: no chunks";
        if (s.finish_reason != "stop" && s.finish_reason != "length")
            return "stream: finish_reason " + quoted(s.finish_reason) + ", expected stop or length";
        if (constrained)
            if (auto why = not_a_person(s.text)) return "stream: " + *why;
        return std::nullopt;
    });
}

GateOutcome determinism_gate(RunContext& run) {
    return run_attempts("determinism", run.plan, [&](int attempt) -> std::optional<std::string> {
        const std::string prompt = kDeterminismPrompts[attempt % std::size(kDeterminismPrompts)];
        const int max_tokens = run.plan.max_tokens;
        json first, second;
        if (auto why = check_chat_reply(run.client.post("determinism", "/v1/chat/completions", chat_body(run, prompt, max_tokens)),
                                         max_tokens, first))
            return "first: " + *why;
        if (auto why = check_chat_reply(run.client.post("determinism", "/v1/chat/completions", chat_body(run, prompt, max_tokens)),
                                         max_tokens, second))
            return "second: " + *why;
        const std::string a = reply_text(first), b = reply_text(second);
        if (a != b) return "two greedy answers differ: " + quoted(a) + " then " + quoted(b);
        if (reply_finish_reason(first) != reply_finish_reason(second)) return "two greedy answers end differently";
        if (usage_of(first, "completion_tokens") != usage_of(second, "completion_tokens"))
            return "two greedy answers differ in completion_tokens";

        json body = chat_body(run, prompt, max_tokens);
        body["stream"] = true;
        const StreamSummary s = summarize_stream(run.client.post("determinism", "/v1/chat/completions", body));
        if (!s.error.empty()) return "streamed: " + s.error;
        if (s.text != a) return "the streamed answer " + quoted(s.text) + " differs from the whole one " + quoted(a);
        if (s.finish_reason != reply_finish_reason(first))
            return "the streamed answer ends with " + quoted(s.finish_reason) + ", the whole one with " + quoted(reply_finish_reason(first));
        return std::nullopt;
    });
}

GateOutcome tools_gate(RunContext& run) {
    const json tools = json::array({
        {{"type", "function"},
         {"function",
          {{"name", "get_weather"},
           {"description", "The current weather in a city."},
           {"parameters",
            {{"type", "object"},
             {"properties", {{"city", {{"type", "string"}, {"description", "The city's name"}}}}},
             {"required", {"city"}}}}}}},
        {{"type", "function"},
         {"function",
          {{"name", "get_time"},
           {"description", "The current local time in a city."},
           {"parameters",
            {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}, {"required", {"city"}}}}}}},
    });
    return run_attempts("tools", run.plan, [&](int) -> std::optional<std::string> {
        json body = chat_body(run, "What is the weather in Paris right now? Use a tool.", std::max(run.plan.max_tokens, 64));
        body["tools"] = tools;
        body["tool_choice"] = "auto";
        const Exchange x = run.client.post("tools", "/v1/chat/completions", body);
        if (!x.ok()) return x.failure();
        const auto reply = x.json();
        if (!reply || !reply->contains("choices") || !(*reply)["choices"].is_array() || (*reply)["choices"].empty())
            return "the response has no choices";
        const json& message = (*reply)["choices"][0].value("message", json::object());
        if (!message.contains("tool_calls") || !message["tool_calls"].is_array() || message["tool_calls"].empty())
            return "no tool_calls in the answer (finish_reason " + quoted(reply_finish_reason(*reply)) + "): " +
                   quoted(message.value("content", json("")).is_string() ? message.value("content", std::string()) : "");
        for (const auto& call : message["tool_calls"]) {
            if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
                return "a tool call has no function: " + quoted(call.dump());
            const json& f = call["function"];
            const std::string name = f.value("name", json("")).is_string() ? f.value("name", std::string()) : "";
            if (name != "get_weather" && name != "get_time") return "a tool call names an unknown function " + quoted(name);
            // OpenAI sends the arguments as a JSON text; some engines send the object itself.
            json arguments;
            if (f.contains("arguments") && f["arguments"].is_string()) {
                if (!json::accept(f["arguments"].get<std::string>()))
                    return "the arguments of " + name + " are not JSON: " + quoted(f["arguments"].get<std::string>());
                arguments = json::parse(f["arguments"].get<std::string>());
            } else if (f.contains("arguments")) {
                arguments = f["arguments"];
            }
            if (!arguments.is_object()) return "the arguments of " + name + " are not a JSON object";
            if (!arguments.contains("city") || !arguments["city"].is_string())
                return "the arguments of " + name + " lack the required string \"city\": " + quoted(arguments.dump());
        }
        return std::nullopt;
    });
}

GateOutcome needle_gate(RunContext& run) {
    const long long context = run.plan.needle_context.value_or(0);
    const std::string question = "\n\nWhat is the secret number mentioned in the text above? Answer with the number only.";
    const char* const keys[] = {"48213", "90571", "36284", "71942", "15839"};
    constexpr int kAnswerTokens = 16;
    auto needle = [](const std::string& key) { return " The secret number is " + key + ". Remember it. "; };

    // How many tokens a filler sentence costs on this engine's tokenizer, from two probes whose
    // usage.prompt_tokens differ only by 64 sentences: the prompts below are sized from it.
    std::optional<std::string> calibration_error;
    long long base_tokens = 0;
    double tokens_per_sentence = 0;
    {
        // Small enough for the context even at one token per byte (a filler sentence is < 80 bytes).
        const int probe_sentences = int(std::clamp<long long>(context / 2 / 80, 1, 64));
        const Exchange a = run.client.post("needle", "/v1/chat/completions", chat_body(run, needle(keys[0]) + question, 1));
        const Exchange b = run.client.post("needle", "/v1/chat/completions",
                                           chat_body(run, filler(probe_sentences) + needle(keys[0]) + question, 1));
        // -1: no count (GCC 12 misreads optionals here as maybe uninitialised).
        auto prompt_tokens = [](const Exchange& x) {
            const auto reply = x.ok() ? x.json() : std::nullopt;
            return reply ? usage_of(*reply, "prompt_tokens").value_or(-1) : -1;
        };
        const long long pa = prompt_tokens(a), pb = prompt_tokens(b);
        if (!a.ok()) calibration_error = a.failure();
        else if (!b.ok()) calibration_error = b.failure();
        else if (pa < 0 || pb <= pa) calibration_error = "usage.prompt_tokens missing from the probes";
        else base_tokens = pa, tokens_per_sentence = double(pb - pa) / probe_sentences;
        run.journal.note("needle", calibration_error ? "calibration failed: " + *calibration_error
                                                     : "base " + std::to_string(base_tokens) + " tokens, " +
                                                           std::to_string(tokens_per_sentence) + " tokens per filler sentence");
    }

    std::vector<long long> lengths;
    if (context / 2 >= 128) lengths.push_back(context / 2);
    lengths.push_back(context);

    return run_attempts("needle", run.plan, [&](int attempt) -> std::optional<std::string> {
        if (calibration_error) return "calibration: " + *calibration_error;
        const std::string key = keys[attempt % std::size(keys)];
        std::vector<std::string> misses;
        int probes = 0;
        for (const long long length : lengths) {
            // 5% below the target: the needle and the cut points move a few tokens either way.
            const double room = 0.95 * double(length - base_tokens - kAnswerTokens);
            const auto sentences = std::size_t(std::max(0.0, std::floor(room / tokens_per_sentence)));
            for (const double depth : run.plan.needle_depths) {
                ++probes;
                const auto at = std::size_t(std::lround(std::clamp(depth, 0.0, 1.0) * double(sentences)));
                const std::string text = filler(at) + needle(key) + filler(sentences - at, at) + question;
                const std::string where = "depth " + std::to_string(depth).substr(0, 4) + " of " + std::to_string(length) + " tokens";
                const Exchange x = run.client.post("needle", "/v1/chat/completions", chat_body(run, text, kAnswerTokens));
                if (!x.ok()) {
                    misses.push_back(where + ": " + x.failure());
                    continue;
                }
                const json reply = x.json().value_or(json());
                const auto prompt_tokens = usage_of(reply, "prompt_tokens");
                if (prompt_tokens && *prompt_tokens > length) {
                    misses.push_back(where + ": the prompt came out at " + std::to_string(*prompt_tokens) + " tokens");
                    continue;
                }
                const std::string answer = reply_text(reply);
                std::string digits;
                for (char c : answer)
                    if (c >= '0' && c <= '9') digits += c;
                if (answer.find(key) == std::string::npos && digits.find(key) == std::string::npos)
                    misses.push_back(where + " (prompt " + (prompt_tokens ? std::to_string(*prompt_tokens) : "?") +
                                     " tokens): the answer " + quoted(answer, 40) + " lacks " + key);
            }
        }
        if (misses.empty()) return std::nullopt;
        std::string why = std::to_string(misses.size()) + " of " + std::to_string(probes) + " missed: " + misses.front();
        for (std::size_t i = 1; i < misses.size() && i < 3; ++i) why += "; " + misses[i];
        return why;
    });
}

GateFunction gate_function(std::string_view name) {
    static constexpr std::pair<std::string_view, GateFunction> kFunctions[] = {
        {"identity", identity_gate}, {"smoke", smoke_gate}, {"json", json_gate},
        {"determinism", determinism_gate}, {"tools", tools_gate}, {"needle", needle_gate},
    };
    for (const auto& [gate, function] : kFunctions)
        if (gate == name) return function;
    return nullptr;
}

}  // namespace anvil::qualify::detail
