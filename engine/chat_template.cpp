#include "engine/chat_template.hpp"

#include <stdexcept>

namespace anvil::engine {

namespace {

// Qwen2.5's template opens every conversation that lacks a system turn with this one.
constexpr const char* kQwenDefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

}  // namespace

std::string trim_whitespace(const std::string& text) {
    const char* space = " \t\n\r\f\v";
    const size_t first = text.find_first_not_of(space);
    if (first == std::string::npos) return {};
    return text.substr(first, text.find_last_not_of(space) - first + 1);
}

const char* chat_family_name(ChatFamily family) {
    switch (family) {
        case ChatFamily::ChatMl: return "chatml";
        case ChatFamily::Llama3: return "llama3";
        case ChatFamily::Mistral: return "mistral";
        case ChatFamily::Llama2: return "llama2";
    }
    return "?";
}

ChatTemplate::ChatTemplate(ChatFamily family, std::string bos, std::string eos, std::string default_system)
    : family_(family), bos_(std::move(bos)), eos_(std::move(eos)), default_system_(std::move(default_system)) {}

ChatTemplate ChatTemplate::detect(const Tokenizer& tokenizer) {
    const std::string& text = tokenizer.chat_template();
    if (text.empty())
        throw std::runtime_error("the model has no chat_template (tokenizer_config.json's, or a GGUF file's tokenizer.chat_template): use /v1/completions");
    if (text.find("<|im_start|>") != std::string::npos)
        return ChatTemplate(ChatFamily::ChatMl, tokenizer.bos_token(), tokenizer.eos_token(),
                            text.find(kQwenDefaultSystem) != std::string::npos ? kQwenDefaultSystem : "");
    if (text.find("<|start_header_id|>") != std::string::npos)
        return ChatTemplate(ChatFamily::Llama3, tokenizer.bos_token(), tokenizer.eos_token());
    // Llama-2-chat's template is Mistral's [INST] turns with a <<SYS>> block and BOS per turn.
    if (text.find("[INST]") != std::string::npos && text.find("<<SYS>>") != std::string::npos)
        return ChatTemplate(ChatFamily::Llama2, tokenizer.bos_token(), tokenizer.eos_token());
    if (text.find("[INST]") != std::string::npos)
        return ChatTemplate(ChatFamily::Mistral, tokenizer.bos_token(), tokenizer.eos_token());
    throw std::runtime_error("the model's chat_template is of no family anvil-engine renders (chatml, llama3, "
                             "mistral, llama2): use /v1/completions with a prompt formatted by the client");
}

std::vector<std::string> ChatTemplate::end_of_turn() const {
    switch (family_) {
        case ChatFamily::ChatMl: return {"<|im_end|>"};
        case ChatFamily::Llama3: return {"<|eot_id|>"};
        case ChatFamily::Mistral:
        case ChatFamily::Llama2: return {eos_};
    }
    return {};
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, const ToolRequest* tools) const {
    if (messages.empty()) throw std::invalid_argument("messages must hold at least one message");
    for (const auto& m : messages)
        if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
            throw std::invalid_argument("message role '" + m.role + "' is not supported (system, user, assistant, tool)");
    const bool offer = tools && tools->active();
    std::string out;
    switch (family_) {
        case ChatFamily::ChatMl: {
            const bool has_system = messages.front().role == "system";
            if (offer) {
                const std::string system = has_system ? messages.front().content : default_system_;
                const std::string section = tools_prompt(family_, tools->tools);
                // Without any system text the section starts the turn itself.
                out += "<|im_start|>system\n" + (system.empty() ? section.substr(2) : system + section) + "<|im_end|>\n";
            } else if (!default_system_.empty() && !has_system) {
                out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
            }
            for (size_t i = offer && has_system ? 1 : 0; i < messages.size(); ++i) {
                const auto& m = messages[i];
                if (m.role == "tool") {
                    // Consecutive results share one user turn.
                    if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
                    out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
                    if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
                    continue;
                }
                std::string text = m.content;
                if (!m.tool_calls.empty()) text += (text.empty() ? "" : "\n") + render_calls(family_, m.tool_calls);
                out += "<|im_start|>" + m.role + "\n" + text + "<|im_end|>\n";
            }
            out += "<|im_start|>assistant\n";
            break;
        }
        case ChatFamily::Llama3: {
            out += bos_;
            bool offered = false;
            for (const auto& m : messages) {
                if (m.role == "tool") {
                    out += "<|start_header_id|>ipython<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
                    continue;
                }
                std::string text = trim_whitespace(m.content);
                if (offer && !offered && m.role == "user") text = tools_prompt(family_, tools->tools) + text, offered = true;
                if (!m.tool_calls.empty()) text = render_calls(family_, m.tool_calls);
                out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + text + "<|eot_id|>";
            }
            out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
            break;
        }
        case ChatFamily::Mistral: {
            // The system text joins the first user turn; user and assistant turns alternate, an
            // assistant's calls followed by their results and then its answer.
            size_t first = 0;
            std::string system;
            if (messages.front().role == "system") {
                system = messages.front().content;
                first = 1;
            }
            size_t last_user = messages.size();
            for (size_t i = first; i < messages.size(); ++i)
                if (messages[i].role == "user") last_user = i;
            const auto order_error = [] {
                return std::invalid_argument("this model's chat template needs user and assistant turns to alternate, "
                                             "starting with user (after an optional system message), with tool results "
                                             "only after an assistant's tool calls");
            };
            out += bos_;
            std::string expect = "user";  // user | assistant | tool-or-assistant
            for (size_t i = first; i < messages.size(); ++i) {
                const auto& m = messages[i];
                if (m.role == "user") {
                    if (expect != "user") throw order_error();
                    const std::string text = i == first && !system.empty() ? system + "\n\n" + m.content : m.content;
                    if (offer && i == last_user) out += tools_prompt(family_, tools->tools);
                    out += "[INST] " + text + " [/INST]";
                    expect = "assistant";
                } else if (m.role == "assistant") {
                    if (expect == "user") throw order_error();
                    if (!m.tool_calls.empty()) {
                        out += render_calls(family_, m.tool_calls) + eos_;
                        expect = "tool";
                    } else {
                        out += m.content + eos_;
                        expect = "user";
                    }
                } else if (m.role == "tool") {
                    if (expect != "tool" && expect != "tool-or-assistant") throw order_error();
                    out += "[TOOL_RESULTS] " + nlohmann::ordered_json({{"content", m.content}}).dump() + "[/TOOL_RESULTS]";
                    expect = "tool-or-assistant";
                } else {
                    throw order_error();
                }
            }
            if (messages.back().role != "user" && messages.back().role != "tool")
                throw std::invalid_argument("the last message must come from the user or a tool");
            break;
        }
        case ChatFamily::Llama2: {
            // As Llama-2-chat's template: the system text in a <<SYS>> block at the start of the
            // first user turn, BOS before every user turn, turns stripped and alternating.
            if (offer)
                throw std::invalid_argument("this model's chat template (Llama-2-chat) has no tool-call format: send the request without tools");
            size_t first = 0;
            std::string system;
            if (messages.front().role == "system") {
                system = messages.front().content;
                first = 1;
            }
            for (size_t i = first; i < messages.size(); ++i) {
                const auto& m = messages[i];
                if ((m.role == "user") != ((i - first) % 2 == 0) || (m.role != "user" && m.role != "assistant"))
                    throw std::invalid_argument("this model's chat template needs user and assistant turns to alternate, "
                                                "starting with user (after an optional system message)");
                std::string text = m.content;
                if (i == first && first == 1) text = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + text;
                if (m.role == "user") out += bos_ + "[INST] " + trim_whitespace(text) + " [/INST]";
                else out += " " + trim_whitespace(text) + " " + eos_;
            }
            if (messages.back().role != "user") throw std::invalid_argument("the last message must come from the user");
            break;
        }
    }
    return out;
}

}  // namespace anvil::engine
