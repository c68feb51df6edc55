#include "engine/openai_request.hpp"

#include <algorithm>
#include <cctype>
#include <limits>

#include "engine/engine.hpp"
#include "engine/json_grammar.hpp"
#include "engine/unicode.hpp"

namespace anvil::engine {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& what) { throw InvalidRequest(field + " " + what); }

double number(const json& body, const char* field, double fallback, double low, double high) {
    if (!body.contains(field) || body[field].is_null()) return fallback;
    if (!body[field].is_number()) bad(field, "must be a number");
    const double v = body[field].get<double>();
    if (!(v >= low && v <= high)) bad(field, "must be between " + std::to_string(low) + " and " + std::to_string(high));
    return v;
}

std::optional<long long> integer(const json& body, const char* field, long long low, long long high) {
    if (!body.contains(field) || body[field].is_null()) return std::nullopt;
    if (!body[field].is_number_integer()) bad(field, "must be an integer");
    const long long v = body[field].get<long long>();
    if (v < low || v > high) bad(field, "must be between " + std::to_string(low) + " and " + std::to_string(high));
    return v;
}

bool boolean(const json& body, const char* field) {
    if (!body.contains(field) || body[field].is_null()) return false;
    if (!body[field].is_boolean()) bad(field, "must be true or false");
    return body[field].get<bool>();
}

// A logit_bias key's token id, or nullopt unless the key is decimal digits. Past 2^40 it stops
// counting: no vocabulary comes near, and the id is refused either way.
std::optional<long long> token_id_key(const std::string& key) {
    if (key.empty()) return std::nullopt;
    long long id = 0;
    for (char c : key) {
        if (c < '0' || c > '9') return std::nullopt;
        id = std::min(id * 10 + (c - '0'), 1LL << 40);
    }
    return id;
}

// logit_bias: {"<token id>": bias from -100 to 100}, kept sorted by id.
std::vector<LogitBias> logit_bias(const json& body) {
    std::vector<LogitBias> out;
    if (!body.contains("logit_bias") || body["logit_bias"].is_null()) return out;
    const json& map = body["logit_bias"];
    if (!map.is_object())
        bad("logit_bias", "must be an object mapping token ids to biases from -100 to 100, e.g. {\"50256\": -100}");
    for (const auto& [key, value] : map.items()) {
        const auto token = token_id_key(key);
        if (!token)
            bad("logit_bias:", "key \"" + sanitize_utf8(key) + "\" is not a token id (a decimal number such as \"50256\")");
        // Whether an id below 2^31 exists is the engine's to say (Engine::submit knows the vocabulary).
        if (*token > std::numeric_limits<int32_t>::max()) bad("logit_bias:", "token id " + key + " does not exist");
        if (!value.is_number())
            bad("logit_bias:", "the bias of token id " + key + " must be a number from -100 to 100");
        const double bias = value.get<double>();
        if (!(bias >= -100.0 && bias <= 100.0))
            bad("logit_bias:", "the bias of token id " + key + " is " + value.dump() + "; it must be from -100 to 100");
        out.push_back({int32_t(*token), float(bias)});
    }
    std::sort(out.begin(), out.end(), [](const LogitBias& a, const LogitBias& b) { return a.token < b.token; });
    for (size_t i = 1; i < out.size(); ++i)
        if (out[i].token == out[i - 1].token)
            bad("logit_bias:", "token id " + std::to_string(out[i].token) + " appears more than once");
    return out;
}

// response_format: text (no constraint), json_object, or json_schema with a schema of the subset
// JsonGrammar compiles.
std::shared_ptr<const JsonGrammar> response_format(const json& body, std::string_view raw_body) {
    if (!body.contains("response_format") || body["response_format"].is_null()) return nullptr;
    const json& format = body["response_format"];
    if (!format.is_object() || !format.contains("type") || !format["type"].is_string())
        bad("response_format", "must be an object with a type: text, json_object or json_schema");
    const std::string type = format["type"];
    if (type == "text") return nullptr;
    if (type == "json_object") return JsonGrammar::any_object();
    if (type != "json_schema")
        bad("response_format.type", "is \"" + sanitize_utf8(type) + "\"; expected text, json_object or json_schema");
    if (!format.contains("json_schema") || !format["json_schema"].is_object())
        bad("response_format.json_schema", "is required with type json_schema: {\"name\": ..., \"schema\": {...}}");
    const json& spec = format["json_schema"];
    if (spec.contains("name") && !spec["name"].is_string()) bad("response_format.json_schema.name", "must be a string");
    if (spec.contains("strict") && !spec["strict"].is_null() && !spec["strict"].is_boolean())
        bad("response_format.json_schema.strict", "must be true or false");
    if (!spec.contains("schema"))
        bad("response_format.json_schema.schema", "is required: the JSON schema every answer must follow");
    nlohmann::ordered_json schema;
    if (!raw_body.empty()) {
        const auto whole = nlohmann::ordered_json::parse(raw_body);
        schema = whole.at("response_format").at("json_schema").at("schema");
    } else {
        schema = nlohmann::ordered_json::parse(spec["schema"].dump());
    }
    try {
        return JsonGrammar::from_schema(schema, "response_format.json_schema.schema");
    } catch (const UnsupportedSchema& e) {
        throw InvalidRequest(sanitize_utf8(e.what()));
    }
}

// tools and tool_choice, read from the raw body when there is one so that each schema keeps its
// properties' order for the prompt.
ToolRequest tool_request(const json& body, std::string_view raw_body) {
    ToolRequest t;
    const bool has_tools = body.contains("tools") && !body["tools"].is_null();
    if (has_tools) {
        if (!body["tools"].is_array()) bad("tools", "must be a list of {\"type\": \"function\", \"function\": {...}}");
        const nlohmann::ordered_json whole =
            raw_body.empty() ? nlohmann::ordered_json::parse(body.dump()) : nlohmann::ordered_json::parse(raw_body);
        const auto& list = whole.at("tools");
        for (size_t i = 0; i < list.size(); ++i) {
            const std::string where = "tools[" + std::to_string(i) + "]";
            const auto& tool = list[i];
            if (!tool.is_object() || tool.value("type", std::string("function")) != "function" || !tool.contains("function") ||
                !tool["function"].is_object())
                bad(where, "must be {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": {...}}}");
            const auto& f = tool["function"];
            if (!f.contains("name") || !f["name"].is_string()) bad(where + ".function.name", "must be a string");
            const std::string name = f["name"];
            const bool well_formed = !name.empty() && name.size() <= 64 &&
                                     std::all_of(name.begin(), name.end(), [](char c) {
                                         return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
                                     });
            if (!well_formed)
                bad(where + ".function.name", "\"" + sanitize_utf8(name) + "\" must be 1 to 64 letters, digits, _ or -");
            for (const auto& other : t.tools)
                if (other.name == name) bad(where + ".function.name", "\"" + name + "\" is offered twice");
            ToolSpec spec;
            spec.name = name;
            if (f.contains("description") && f["description"].is_string()) spec.description = f["description"];
            spec.parameters = f.contains("parameters") && !f["parameters"].is_null()
                                  ? f["parameters"]
                                  : nlohmann::ordered_json{{"type", "object"}, {"properties", nlohmann::ordered_json::object()}};
            if (!spec.parameters.is_object()) bad(where + ".function.parameters", "must be a JSON schema (an object)");
            t.tools.push_back(std::move(spec));
        }
    }
    t.choice = t.tools.empty() ? ToolChoice::None : ToolChoice::Auto;
    if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
        const json& c = body["tool_choice"];
        if (c.is_string()) {
            const std::string s = c;
            if (s == "none") t.choice = ToolChoice::None;
            else if (s == "auto") t.choice = ToolChoice::Auto;
            else if (s == "required") t.choice = ToolChoice::Required;
            else bad("tool_choice", "is \"" + sanitize_utf8(s) + "\"; expected none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
        } else if (c.is_object() && c.contains("function") && c["function"].is_object() && c["function"].contains("name") &&
                   c["function"]["name"].is_string()) {
            t.choice = ToolChoice::Named;
            t.named = c["function"]["name"];
            bool offered = false;
            for (const auto& spec : t.tools) offered = offered || spec.name == t.named;
            if (!offered) bad("tool_choice.function.name", "\"" + sanitize_utf8(t.named) + "\" is not among the tools offered");
        } else {
            bad("tool_choice", "must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
        }
        if (t.choice != ToolChoice::None && t.tools.empty()) bad("tool_choice", "needs tools to choose from");
    }
    return t;
}

void common(const json& body, std::string_view raw_body, ParsedRequest& r) {
    if (!body.is_object()) throw InvalidRequest("the request body must be a JSON object");
    if (body.contains("model") && !body["model"].is_null()) {
        if (!body["model"].is_string()) bad("model", "must be a string");
        r.model = body["model"];
    }
    r.params.temperature = float(number(body, "temperature", 1.0, 0.0, 2.0));
    r.params.top_p = float(number(body, "top_p", 1.0, 1e-9, 1.0));
    if (auto k = integer(body, "top_k", -1, 1 << 30)) r.params.top_k = int(std::max<long long>(*k, 0));
    if (auto seed = integer(body, "seed", std::numeric_limits<long long>::min(), std::numeric_limits<long long>::max()))
        r.params.seed = uint64_t(*seed) | (uint64_t(1) << 63);  // any client seed, 0 included, differs from "none"
    if (auto n = integer(body, "n", 1, 128)) r.n = int(*n);
    r.stream = boolean(body, "stream");
    r.params.ignore_eos = boolean(body, "ignore_eos");
    if (body.contains("stream_options") && body["stream_options"].is_object())
        r.include_usage = boolean(body["stream_options"], "include_usage");
    if (body.contains("stop") && !body["stop"].is_null()) {
        const json& stop = body["stop"];
        if (stop.is_string()) {
            r.params.stop.push_back(stop);
        } else if (stop.is_array()) {
            for (const auto& s : stop) {
                if (!s.is_string()) bad("stop", "must be a string or a list of strings");
                r.params.stop.push_back(s);
            }
        } else {
            bad("stop", "must be a string or a list of strings");
        }
        for (const auto& s : r.params.stop)
            if (s.empty()) bad("stop", "must not hold an empty string");
    }
    r.params.logit_bias = logit_bias(body);
    r.params.grammar = response_format(body, raw_body);
}

}  // namespace

ParsedRequest parse_completion_request(const json& body, std::string_view raw_body) {
    ParsedRequest r;
    common(body, raw_body, r);
    if (auto m = integer(body, "max_tokens", 1, 1 << 30)) r.params.max_tokens = int(*m), r.max_tokens_given = true;
    if (auto l = integer(body, "logprobs", 0, 20)) r.params.logprobs = int(*l);
    r.echo = boolean(body, "echo");
    // echo with logprobs: the prompt's tokens come with theirs, as vLLM and OpenAI's legacy API give them.
    if (r.echo && r.params.logprobs >= 0) r.params.prompt_logprobs = r.params.logprobs;
    if (!body.contains("prompt")) bad("prompt", "is required");
    const json& prompt = body["prompt"];
    if (prompt.is_string()) {
        r.prompt = prompt.get<std::string>();
    } else if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_string()) {
        r.prompt = prompt[0].get<std::string>();
    } else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number_integer()) {
        for (const auto& t : prompt) {
            if (!t.is_number_integer()) bad("prompt", "must be a string or a list of token ids");
            // Read whole: get<int32_t>() would wrap 2^32 + 5 into token 5.
            constexpr uint64_t kLargest = uint64_t(std::numeric_limits<int32_t>::max());
            const bool fits = t.is_number_unsigned() ? t.get<uint64_t>() <= kLargest
                                                     : t.get<int64_t>() >= 0 && uint64_t(t.get<int64_t>()) <= kLargest;
            if (!fits) bad("prompt:", "token id " + t.dump() + " does not exist");
            r.prompt_tokens.push_back(int32_t(t.get<int64_t>()));
        }
    } else {
        bad("prompt", "must be a string, a list of one string, or a list of token ids");
    }
    return r;
}

ParsedRequest parse_chat_request(const json& body, std::string_view raw_body) {
    ParsedRequest r;
    common(body, raw_body, r);
    if (auto m = integer(body, "max_completion_tokens", 1, 1 << 30)) r.params.max_tokens = int(*m), r.max_tokens_given = true;
    if (auto m = integer(body, "max_tokens", 1, 1 << 30)) r.params.max_tokens = int(*m), r.max_tokens_given = true;
    if (boolean(body, "logprobs")) {
        r.params.logprobs = 0;
        if (auto top = integer(body, "top_logprobs", 0, 20)) r.params.logprobs = int(*top);
    } else if (integer(body, "top_logprobs", 0, 20)) {
        bad("top_logprobs", "needs logprobs: true");
    }
    if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
        bad("messages", "must be a non-empty list");
    for (size_t i = 0; i < body["messages"].size(); ++i) {
        const json& m = body["messages"][i];
        const std::string where = "messages[" + std::to_string(i) + "]";
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) bad(where + ".role", "is required");
        ChatMessage message{m["role"], "", {}, {}};
        const json content = m.value("content", json());
        if (content.is_string()) {
            message.content = content;
        } else if (content.is_array()) {
            for (const auto& part : content) {
                if (!part.is_object() || part.value("type", std::string()) != "text" || !part.contains("text") ||
                    !part["text"].is_string())
                    bad(where + ".content", "parts must be {\"type\": \"text\", \"text\": ...}: this model reads text only");
                message.content += part["text"].get<std::string>();
            }
        } else if (!content.is_null()) {
            bad(where + ".content", "must be a string or a list of text parts");
        }
        if (message.role == "tool") {
            if (!m.contains("tool_call_id") || !m["tool_call_id"].is_string())
                bad(where + ".tool_call_id", "is required for a tool message: the id of the call it answers");
            message.tool_call_id = m["tool_call_id"];
        }
        if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
            if (message.role != "assistant") bad(where + ".tool_calls", "belongs to assistant messages only");
            if (!m["tool_calls"].is_array()) bad(where + ".tool_calls", "must be a list of calls");
            for (size_t k = 0; k < m["tool_calls"].size(); ++k) {
                const json& call = m["tool_calls"][k];
                const std::string at = where + ".tool_calls[" + std::to_string(k) + "]";
                if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
                    bad(at + ".function", "is required: {\"name\": ..., \"arguments\": \"{...}\"}");
                const json& f = call["function"];
                if (!f.contains("name") || !f["name"].is_string()) bad(at + ".function.name", "must be a string");
                std::string arguments = "{}";
                if (f.contains("arguments") && f["arguments"].is_string()) arguments = f["arguments"];
                else if (f.contains("arguments") && f["arguments"].is_object()) arguments = f["arguments"].dump();
                else if (f.contains("arguments") && !f["arguments"].is_null())
                    bad(at + ".function.arguments", "must be a JSON object as text");
                if (!json::accept(arguments) || !json::parse(arguments).is_object())
                    bad(at + ".function.arguments", "must be a JSON object as text, e.g. \"{\\\"city\\\": \\\"Paris\\\"}\"");
                message.tool_calls.push_back({call.value("id", std::string()), f["name"], arguments});
            }
        }
        r.messages.push_back(std::move(message));
    }
    r.tools = tool_request(body, raw_body);
    return r;
}

}  // namespace anvil::engine
