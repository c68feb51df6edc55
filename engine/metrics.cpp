#include "engine/metrics.hpp"

#include <sstream>

namespace anvil::engine {

std::string Metrics::prometheus_text(const std::string& model_name) const {
    std::ostringstream out;
    const std::string label = "{model=\"" + model_name + "\"}";
    auto metric = [&](const char* name, const char* type, const char* help, auto value, const std::string& labels) {
        out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
            << name << labels << " " << value << "\n";
    };
    out << "# HELP anvil_engine_requests_total Requests answered, by outcome.\n"
        << "# TYPE anvil_engine_requests_total counter\n"
        << "anvil_engine_requests_total{model=\"" << model_name << "\",outcome=\"ok\"} " << requests_ok.load() << "\n"
        << "anvil_engine_requests_total{model=\"" << model_name << "\",outcome=\"rejected\"} " << requests_rejected.load() << "\n"
        << "anvil_engine_requests_total{model=\"" << model_name << "\",outcome=\"aborted\"} " << requests_aborted.load() << "\n";
    metric("anvil_engine_prompt_tokens_total", "counter", "Prompt tokens computed.", prompt_tokens.load(), label);
    metric("anvil_engine_generation_tokens_total", "counter", "Tokens generated.", generation_tokens.load(), label);
    metric("anvil_engine_steps_total", "counter", "Forward passes run by the engine thread.", engine_steps.load(), label);
    metric("anvil_engine_preemptions_total", "counter", "Sequences preempted for lack of KV blocks.", preemptions.load(), label);
    metric("anvil_engine_forward_seconds_total", "counter", "Time spent in forward passes.",
           double(forward_microseconds.load()) / 1e6, label);
    metric("anvil_engine_constrained_tokens_total", "counter", "Tokens sampled under a response_format grammar.",
           constrained_tokens.load(), label);
    metric("anvil_engine_constraint_seconds_total", "counter", "Time spent computing the grammar's token masks.",
           double(constraint_microseconds.load()) / 1e6, label);
    metric("anvil_engine_requests_running", "gauge", "Sequences in the running batch.", running.load(), label);
    metric("anvil_engine_requests_waiting", "gauge", "Sequences queued for admission.", waiting.load(), label);
    metric("anvil_engine_kv_blocks_used", "gauge", "KV-cache blocks in use.", kv_blocks_used.load(), label);
    metric("anvil_engine_kv_blocks_total", "gauge", "KV-cache blocks in the pool.", kv_blocks_total.load(), label);
    metric("anvil_engine_kv_blocks_cached", "gauge", "Free KV-cache blocks still holding a cached prefix.",
           kv_blocks_cached.load(), label);
    metric("anvil_engine_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
           prefix_cache_queries.load(), label);
    metric("anvil_engine_prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache, not computed.",
           prefix_cache_hits.load(), label);
    if (const uint64_t gpu = gpu_memory_bytes.load(); gpu > 0)
        metric("anvil_engine_gpu_memory_bytes", "gauge", "GPU memory the engine's runners hold: weights, working memory and KV cache.",
               gpu, label);
    const int64_t total = kv_blocks_total.load();
    metric("anvil_engine_kv_cache_usage_ratio", "gauge", "Fraction of KV-cache blocks in use.",
           total > 0 ? double(kv_blocks_used.load()) / double(total) : 0.0, label);
    if (draft_kind != "none") {
        const uint64_t proposed = draft_proposed.load(), accepted = draft_accepted.load(),
                       verifications = draft_verifications.load();
        const std::string draft_label = "{model=\"" + model_name + "\",draft=\"" + draft_kind + "\"}";
        metric("anvil_engine_draft_proposed_tokens_total", "counter", "Draft tokens proposed and verified.", proposed,
               draft_label);
        metric("anvil_engine_draft_accepted_tokens_total", "counter", "Draft tokens the target accepted.", accepted,
               draft_label);
        metric("anvil_engine_draft_verifications_total", "counter",
               "Verifications: one per sequence per speculative step.", verifications, draft_label);
        metric("anvil_engine_draft_seconds_total", "counter", "Time spent proposing draft tokens.",
               double(draft_microseconds.load()) / 1e6, draft_label);
        metric("anvil_engine_draft_acceptance_ratio", "gauge", "Accepted over proposed draft tokens.",
               proposed > 0 ? double(accepted) / double(proposed) : 0.0, draft_label);
        metric("anvil_engine_draft_mean_accepted_tokens", "gauge", "Draft tokens accepted per verification.",
               verifications > 0 ? double(accepted) / double(verifications) : 0.0, draft_label);
    }
    return out.str();
}

}  // namespace anvil::engine
