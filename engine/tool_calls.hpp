// Tool calling on chat completions: the tools a request offers, each chat family's syntax for
// offering them and for a call (Qwen's <tool_call> tags for chatml, Llama 3.1's JSON object,
// Mistral's [TOOL_CALLS] list), the grammar that forces a call when tool_choice requires one, and
// the parser that turns an answer back into OpenAI's tool_calls, also while it streams.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/json_grammar.hpp"

namespace anvil::engine {

enum class ChatFamily;

struct ToolSpec {
    std::string name;
    std::string description;
    nlohmann::ordered_json parameters;  // a JSON schema of the supported subset (JsonGrammar)
};

struct ToolCall {
    std::string id;
    std::string name;
    std::string arguments;  // a JSON object, as text
};

enum class ToolChoice { None, Auto, Required, Named };

struct ToolRequest {
    std::vector<ToolSpec> tools;
    ToolChoice choice = ToolChoice::None;
    std::string named;  // ToolChoice::Named: the function
    bool active() const { return !tools.empty() && choice != ToolChoice::None; }
};

// The tools section or prompt text a family puts before the conversation (rendered by
// ChatTemplate), and an assistant turn's calls as the family writes them.
std::string tools_prompt(ChatFamily family, const std::vector<ToolSpec>& tools);
std::string render_calls(ChatFamily family, const std::vector<ToolCall>& calls);

// The grammar of one call in the family's syntax to one of `tools` (the named one only, for
// ToolChoice::Named), its arguments following the tool's parameters schema. Throws
// UnsupportedSchema naming tools[i].function.parameters for a schema outside the subset.
std::shared_ptr<const JsonGrammar> call_grammar(ChatFamily family, const ToolRequest& request);

// Splits an answer into text and the calls it makes to known tools, in the family's syntax; text
// that only looks like a call (unknown function, arguments not a JSON object) stays text.
struct ParsedAnswer {
    std::string content;
    std::vector<ToolCall> calls;
};
ParsedAnswer parse_calls(ChatFamily family, const std::string& answer, const std::vector<ToolSpec>& tools);

// For streaming: text is passed on as it comes, except from where a call may begin (the family's
// marker, or for Llama 3 an answer that starts with '{'), which is held until the answer ends.
class ToolCallStream {
public:
    ToolCallStream(ChatFamily family, const std::vector<ToolSpec>* tools) : family_(family), tools_(tools) {}
    std::string push(const std::string& text);  // what may be sent now
    ParsedAnswer finish();                       // the held text, as content and calls

private:
    ChatFamily family_;
    const std::vector<ToolSpec>* tools_;
    std::string sent_, held_;
    bool holding_all_ = false;
};

// A fresh call id: "call_" and 24 random alphanumerics, as OpenAI's look.
std::string new_call_id();

}  // namespace anvil::engine
