#include "engine/chat_template.hpp"

#include <stdexcept>

namespace anvil::engine {

namespace {

// Qwen2.5's template opens every conversation that lacks a system turn with this one.
constexpr const char* kQwenDefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

std::string trim(const std::string& text) {
    const char* space = " \t\n\r\f\v";
    const size_t first = text.find_first_not_of(space);
    if (first == std::string::npos) return {};
    return text.substr(first, text.find_last_not_of(space) - first + 1);
}

}  // namespace

const char* chat_family_name(ChatFamily family) {
    switch (family) {
        case ChatFamily::ChatMl: return "chatml";
        case ChatFamily::Llama3: return "llama3";
        case ChatFamily::Mistral: return "mistral";
    }
    return "?";
}

ChatTemplate::ChatTemplate(ChatFamily family, std::string bos, std::string eos, std::string default_system)
    : family_(family), bos_(std::move(bos)), eos_(std::move(eos)), default_system_(std::move(default_system)) {}

ChatTemplate ChatTemplate::detect(const Tokenizer& tokenizer) {
    const std::string& text = tokenizer.chat_template();
    if (text.empty())
        throw std::runtime_error("the model has no chat_template in tokenizer_config.json: use /v1/completions");
    if (text.find("<|im_start|>") != std::string::npos)
        return ChatTemplate(ChatFamily::ChatMl, tokenizer.bos_token(), tokenizer.eos_token(),
                            text.find(kQwenDefaultSystem) != std::string::npos ? kQwenDefaultSystem : "");
    if (text.find("<|start_header_id|>") != std::string::npos)
        return ChatTemplate(ChatFamily::Llama3, tokenizer.bos_token(), tokenizer.eos_token());
    if (text.find("[INST]") != std::string::npos)
        return ChatTemplate(ChatFamily::Mistral, tokenizer.bos_token(), tokenizer.eos_token());
    throw std::runtime_error("the model's chat_template is of no family anvil-engine renders (chatml, llama3, "
                             "mistral): use /v1/completions with a prompt formatted by the client");
}

std::vector<std::string> ChatTemplate::end_of_turn() const {
    switch (family_) {
        case ChatFamily::ChatMl: return {"<|im_end|>"};
        case ChatFamily::Llama3: return {"<|eot_id|>"};
        case ChatFamily::Mistral: return {eos_};
    }
    return {};
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages) const {
    if (messages.empty()) throw std::invalid_argument("messages must hold at least one message");
    for (const auto& m : messages)
        if (m.role != "system" && m.role != "user" && m.role != "assistant")
            throw std::invalid_argument("message role '" + m.role + "' is not supported (system, user, assistant)");
    std::string out;
    switch (family_) {
        case ChatFamily::ChatMl: {
            if (!default_system_.empty() && messages.front().role != "system")
                out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
            for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
            out += "<|im_start|>assistant\n";
            break;
        }
        case ChatFamily::Llama3: {
            out += bos_;
            for (const auto& m : messages)
                out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
            out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
            break;
        }
        case ChatFamily::Mistral: {
            // The system text joins the first user turn; turns must alternate user/assistant.
            size_t first = 0;
            std::string system;
            if (messages.front().role == "system") {
                system = messages.front().content;
                first = 1;
            }
            out += bos_;
            for (size_t i = first; i < messages.size(); ++i) {
                const auto& m = messages[i];
                const bool user_turn = (i - first) % 2 == 0;
                if (m.role != (user_turn ? "user" : "assistant"))
                    throw std::invalid_argument("this model's chat template needs user and assistant turns to "
                                                "alternate, starting with user (after an optional system message)");
                if (user_turn) {
                    const std::string text = i == first && !system.empty() ? system + "\n\n" + m.content : m.content;
                    out += "[INST] " + text + " [/INST]";
                } else {
                    out += m.content + eos_;
                }
            }
            if (messages.back().role != "user")
                throw std::invalid_argument("the last message must come from the user");
            break;
        }
    }
    return out;
}

}  // namespace anvil::engine
