// What every gate and measurement of one qualification run shares: the target, the plan, the
// journal of exchanges and a client for the engine; plus the fixed prompts and request bodies,
// which stay the same across runs so that receipts of different candidates compare.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/qualify/engine_client.hpp"
#include "daemon/qualify/qualification.hpp"

namespace anvil::qualify::detail {

struct RunContext {
    RunContext(const Target& t, const Plan& p, Journal& j)
        : target(t), plan(p), journal(j), client(t.host, t.port, p.request_timeout, j, p.cancelled, t.api_key) {}
    const Target& target;
    const Plan& plan;
    Journal& journal;
    EngineClient client;
    std::optional<long long> max_model_len;  // what /v1/models said, when it says (vLLM and anvil-engine do)
};

// A greedy chat request for `content` (temperature 0, the promised model id).
inline nlohmann::json chat_body(const RunContext& run, const std::string& content, int max_tokens) {
    return {{"model", run.target.model},
            {"messages", nlohmann::json::array({{{"role", "user"}, {"content", content}}})},
            {"max_tokens", max_tokens},
            {"temperature", 0}};
}

// A greedy text completion (works on engines with no chat template, and keeps prefixes exact).
inline nlohmann::json completion_body(const RunContext& run, const std::string& prompt, int max_tokens) {
    return {{"model", run.target.model}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

// Filler prose for long prompts: varied sentences, so a prompt is not one repeated token pattern.
std::string filler(std::size_t sentences, std::size_t offset = 0);

}  // namespace anvil::qualify::detail
