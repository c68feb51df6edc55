#include "engine/tool_calls.hpp"
#include "support/random.hpp"


#include "engine/chat_template.hpp"

namespace anvil::engine {

using ojson = nlohmann::ordered_json;

namespace {

// JSON as Python's json.dumps writes it (", " and ": "), which is what the families' Jinja
// templates (tojson) put in the prompt, so the model sees the text it was trained on.
std::string python_json(const ojson& v) {
    if (v.is_object()) {
        std::string out = "{";
        bool first = true;
        for (const auto& [k, x] : v.items()) {
            out += (first ? "" : ", ") + ojson(k).dump() + ": " + python_json(x);
            first = false;
        }
        return out + "}";
    }
    if (v.is_array()) {
        std::string out = "[";
        for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + python_json(v[i]);
        return out + "]";
    }
    return v.dump();
}

ojson tool_json(const ToolSpec& t) {
    ojson function = {{"name", t.name}};
    if (!t.description.empty()) function["description"] = t.description;
    function["parameters"] = t.parameters;
    return {{"type", "function"}, {"function", function}};
}

const char* kQwenToolsIntro =
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function "
    "signatures within <tools></tools> XML tags:\n<tools>";
const char* kQwenToolsOutro =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
    "</tool_call>";
const char* kLlamaToolsIntro =
    "Given the following functions, please respond with a JSON for a function call with its proper arguments that best "
    "answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary of argument "
    "name and its value}.Do not use variables.\n\n";

// The text before a call's arguments, and after them.
std::string call_head(ChatFamily family, const std::string& name) {
    const std::string quoted = ojson(name).dump();
    switch (family) {
        case ChatFamily::ChatMl: return "<tool_call>\n{\"name\": " + quoted + ", \"arguments\": ";
        case ChatFamily::Llama3: return "{\"name\": " + quoted + ", \"parameters\": ";
        case ChatFamily::Mistral:
        case ChatFamily::Llama2: return "[TOOL_CALLS] [{\"name\": " + quoted + ", \"arguments\": ";
    }
    return {};
}

std::string call_tail(ChatFamily family) {
    switch (family) {
        case ChatFamily::ChatMl: return "}\n</tool_call>";
        case ChatFamily::Llama3: return "}";
        case ChatFamily::Mistral:
        case ChatFamily::Llama2: return "}]";
    }
    return {};
}

// {"name": ..., "arguments" (or "parameters"): {...}} naming one of the tools, as a call.
std::optional<ToolCall> call_of(const ojson& v, const std::vector<ToolSpec>& tools) {
    if (!v.is_object() || !v.contains("name") || !v["name"].is_string()) return std::nullopt;
    const std::string name = v["name"];
    bool known = false;
    for (const auto& t : tools) known = known || t.name == name;
    if (!known) return std::nullopt;
    ojson arguments = v.contains("arguments") ? v["arguments"] : v.value("parameters", ojson());
    if (arguments.is_string() && ojson::accept(arguments.get<std::string>())) arguments = ojson::parse(arguments.get<std::string>());
    if (!arguments.is_object()) return std::nullopt;
    return ToolCall{new_call_id(), name, arguments.dump()};
}

std::optional<ojson> parse_json(const std::string& text) {
    if (!ojson::accept(text)) return std::nullopt;
    return ojson::parse(text);
}

const char* marker(ChatFamily family) {
    switch (family) {
        case ChatFamily::ChatMl: return "<tool_call>";
        case ChatFamily::Mistral:
        case ChatFamily::Llama2: return "[TOOL_CALLS]";
        case ChatFamily::Llama3: return "{";
    }
    return "";
}

}  // namespace

std::string new_call_id() {
    return "call_" + support::random_hex(12);
}

std::string tools_prompt(ChatFamily family, const std::vector<ToolSpec>& tools) {
    switch (family) {
        case ChatFamily::ChatMl: {
            std::string out = kQwenToolsIntro;
            for (const auto& t : tools) out += "\n" + python_json(tool_json(t));
            return out + kQwenToolsOutro;
        }
        case ChatFamily::Llama3: {
            std::string out = kLlamaToolsIntro;
            for (const auto& t : tools) out += tool_json(t).dump(4) + "\n\n";
            return out;
        }
        case ChatFamily::Mistral:
        case ChatFamily::Llama2: {  // never offered tools (ChatTemplate::render refuses them)
            ojson list = ojson::array();
            for (const auto& t : tools) list.push_back(tool_json(t));
            return "[AVAILABLE_TOOLS] " + python_json(list) + "[/AVAILABLE_TOOLS]";
        }
    }
    return {};
}

std::string render_calls(ChatFamily family, const std::vector<ToolCall>& calls) {
    std::string out;
    if (family == ChatFamily::Mistral) {
        ojson list = ojson::array();
        for (const auto& c : calls) list.push_back({{"name", c.name}, {"arguments", ojson::parse(c.arguments)}});
        return "[TOOL_CALLS] " + python_json(list);
    }
    for (size_t i = 0; i < calls.size(); ++i) {
        const ToolCall& c = calls[i];
        if (family == ChatFamily::ChatMl) out += (i ? "\n" : "");
        out += call_head(family, c.name) + python_json(ojson::parse(c.arguments)) + call_tail(family);
    }
    return out;
}

std::shared_ptr<const JsonGrammar> call_grammar(ChatFamily family, const ToolRequest& request) {
    auto g = std::make_shared<JsonGrammar>();
    std::vector<std::pair<std::string, uint32_t>> options;
    for (size_t i = 0; i < request.tools.size(); ++i) {
        const ToolSpec& t = request.tools[i];
        if (request.choice == ToolChoice::Named && t.name != request.named) continue;
        const uint32_t arguments = g->compile(t.parameters, "tools[" + std::to_string(i) + "].function.parameters");
        options.emplace_back(call_head(family, t.name), g->add_sequence({{"", arguments}, {call_tail(family), JsonGrammar::kNone}}));
    }
    g->set_root(g->add_choice(options));
    return g;
}

ParsedAnswer parse_calls(ChatFamily family, const std::string& answer, const std::vector<ToolSpec>& tools) {
    ParsedAnswer out;
    switch (family) {
        case ChatFamily::ChatMl: {
            size_t at = 0;
            while (at < answer.size()) {
                const size_t open = answer.find("<tool_call>", at);
                const size_t close = open == std::string::npos ? open : answer.find("</tool_call>", open);
                if (close == std::string::npos) break;
                const auto v = parse_json(trim_whitespace(answer.substr(open + 11, close - open - 11)));
                const auto call = v ? call_of(*v, tools) : std::nullopt;
                if (!call) break;
                out.content += answer.substr(at, open - at);
                out.calls.push_back(*call);
                at = close + 12;
            }
            out.content += answer.substr(std::min(at, answer.size()));
            break;
        }
        case ChatFamily::Llama3: {
            const auto v = parse_json(trim_whitespace(answer));
            const auto call = v ? call_of(*v, tools) : std::nullopt;
            if (call) out.calls.push_back(*call);
            else out.content = answer;
            break;
        }
        case ChatFamily::Mistral:
        case ChatFamily::Llama2: {
            const std::string t = trim_whitespace(answer);
            const auto v = t.rfind("[TOOL_CALLS]", 0) == 0 ? parse_json(trim_whitespace(t.substr(12))) : std::nullopt;
            if (v && v->is_array() && !v->empty()) {
                for (const auto& item : *v)
                    if (auto call = call_of(item, tools)) out.calls.push_back(*call);
                if (out.calls.size() != v->size()) out.calls.clear();
            }
            if (out.calls.empty()) out.content = answer;
            break;
        }
    }
    if (!out.calls.empty()) out.content = trim_whitespace(out.content);
    return out;
}

std::string ToolCallStream::push(const std::string& text) {
    if (holding_all_) {
        held_ += text;
        return {};
    }
    std::string all = held_ + text;
    held_.clear();
    if (family_ == ChatFamily::Llama3) {
        // A call is the whole answer: decided by its first character that is not whitespace.
        if (!sent_.empty()) return sent_ += all, all;
        const size_t first = all.find_first_not_of(" \t\n\r");
        if (first == std::string::npos) return held_ = all, std::string();
        if (all[first] == '{') return holding_all_ = true, held_ = all, std::string();
        sent_ = all;
        return all;
    }
    const std::string m = marker(family_);
    const size_t at = all.find(m);
    if (at != std::string::npos) {
        holding_all_ = true;
        held_ = all.substr(at);
        sent_ += all.substr(0, at);
        return all.substr(0, at);
    }
    // Hold a tail that may be the marker's beginning.
    size_t hold = 0;
    for (size_t k = std::min(m.size() - 1, all.size()); k > 0; --k)
        if (all.compare(all.size() - k, k, m, 0, k) == 0) {
            hold = k;
            break;
        }
    held_ = all.substr(all.size() - hold);
    all.resize(all.size() - hold);
    sent_ += all;
    return all;
}

ParsedAnswer ToolCallStream::finish() {
    ParsedAnswer parsed = parse_calls(family_, held_, *tools_);
    if (parsed.calls.empty()) parsed.content = held_;  // nothing held was a call: it is text after all
    held_.clear();
    return parsed;
}

}  // namespace anvil::engine
