// Chat formatting. Rather than run Jinja, the family is recognised from the template text
// (chatml, Llama-3, Mistral, Llama-2-chat) and rendered natively; any other template is refused up front.
#pragma once

#include <string>
#include <vector>

#include "engine/tokenizer.hpp"
#include "engine/tool_calls.hpp"

namespace anvil::engine {

struct ChatMessage {
    ChatMessage(std::string role_, std::string content_, std::vector<ToolCall> tool_calls_ = {}, std::string tool_call_id_ = {})
        : role(std::move(role_)), content(std::move(content_)), tool_calls(std::move(tool_calls_)),
          tool_call_id(std::move(tool_call_id_)) {}
    std::string role;  // system | user | assistant | tool
    std::string content;
    std::vector<ToolCall> tool_calls;  // assistant: the calls it made
    std::string tool_call_id;          // tool: the call it answers
};

enum class ChatFamily { ChatMl, Llama3, Mistral, Llama2 };
// `text` without the whitespace at its ends, as the templates' | trim does it.
std::string trim_whitespace(const std::string& text);
const char* chat_family_name(ChatFamily family);

class ChatTemplate {
public:
    // Throws std::runtime_error when the tokenizer has no chat template or one of another family.
    static ChatTemplate detect(const Tokenizer& tokenizer);
    ChatTemplate(ChatFamily family, std::string bos, std::string eos, std::string default_system = {});

    // The prompt text, special tokens included, ending with the assistant's turn opened.
    // Throws std::invalid_argument (a 400 for the client) for roles or orders the family rejects.
    // With `tools` active, they are offered in the family's own format (Qwen's tools section in
    // the system turn, Llama 3.1's JSON prompt in the first user turn, Mistral's [AVAILABLE_TOOLS]
    // before the last user turn); assistant calls and tool results are rendered as it writes them.
    // Llama-2-chat has no tool format: tools are refused.
    std::string render(const std::vector<ChatMessage>& messages, const ToolRequest* tools = nullptr) const;
    ChatFamily family() const { return family_; }
    // The token texts that end an assistant turn besides the model's eos ids.
    std::vector<std::string> end_of_turn() const;

private:
    ChatFamily family_;
    std::string bos_, eos_, default_system_;
};

}  // namespace anvil::engine
