// Reading OpenAI-shaped request bodies into sampling parameters and prompts, with 400-worthy
// messages that name the offending field.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/chat_template.hpp"
#include "engine/sampler.hpp"

namespace anvil::engine {

struct ParsedRequest {
    SamplingParams params;
    bool max_tokens_given = false;
    bool stream = false;
    bool include_usage = false;
    int n = 1;                           // choices to generate; the engine bounds it by its max_seqs
    bool echo = false;                   // completions: the prompt goes before each choice's text
    std::string model;                   // as the client named it; empty when absent
    std::optional<std::string> prompt;   // completions: text
    std::vector<int32_t> prompt_tokens;  // completions: token ids instead of text
    std::vector<ChatMessage> messages;   // chat
    ToolRequest tools;                   // chat: tools offered and tool_choice
};

// Both throw InvalidRequest (engine.hpp) on a malformed body. `raw_body`, the text `body` was
// parsed from, keeps a response_format schema's properties in the order the client wrote them
// (nlohmann::json sorts keys); without it they come in alphabetical order.
ParsedRequest parse_completion_request(const nlohmann::json& body, std::string_view raw_body = {});
ParsedRequest parse_chat_request(const nlohmann::json& body, std::string_view raw_body = {});

}  // namespace anvil::engine
