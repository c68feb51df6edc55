// Chat formatting. Rather than run Jinja, the family is recognised from the template text
// (chatml, Llama-3, Mistral) and rendered natively; any other template is refused up front.
#pragma once

#include <string>
#include <vector>

#include "engine/tokenizer.hpp"

namespace anvil::engine {

struct ChatMessage {
    std::string role;  // system | user | assistant
    std::string content;
};

enum class ChatFamily { ChatMl, Llama3, Mistral };
const char* chat_family_name(ChatFamily family);

class ChatTemplate {
public:
    // Throws std::runtime_error when the tokenizer has no chat template or one of another family.
    static ChatTemplate detect(const Tokenizer& tokenizer);
    ChatTemplate(ChatFamily family, std::string bos, std::string eos, std::string default_system = {});

    // The prompt text, special tokens included, ending with the assistant's turn opened.
    // Throws std::invalid_argument (a 400 for the client) for roles or orders the family rejects.
    std::string render(const std::vector<ChatMessage>& messages) const;
    ChatFamily family() const { return family_; }
    // The token texts that end an assistant turn besides the model's eos ids.
    std::vector<std::string> end_of_turn() const;

private:
    ChatFamily family_;
    std::string bos_, eos_, default_system_;
};

}  // namespace anvil::engine
