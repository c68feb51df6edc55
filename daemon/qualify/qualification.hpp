// Qualification: real requests against a running OpenAI-compatible engine (embedded, process or
// container alike) that decide its hard gates, measure its speed, and sample its next-token
// distributions so its quality can be compared with the control's. Every run writes a receipt
// (requests, responses, timings, identities) whose sha256 travels with each evidence row it yields.
#pragma once

#include <atomic>
#include <stdexcept>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/qualify/metrics_catalogue.hpp"

namespace anvil::qualify {

// The engine under test and where it came from (all of it goes into the receipt).
struct Target {
    std::string host = "127.0.0.1";
    int port = 0;
    std::string model;  // the served model id the recipe promises
    std::string recipe_id;
    std::int64_t revision_id = 0;
    std::string revision_sha256;
    std::string commit_id;
    std::string engine_id;
    std::string driver;
    std::optional<int> pid;  // for peak memory (VmHWM of the process tree), when known
    std::string api_key;     // sent as 'Authorization: Bearer' when set; never written to a receipt
};

struct Plan {
    int attempts = 3;                 // per hard gate
    double min_pass_rate = 1.0;       // min_deterministic_pass_rate
    // Which gates run is state::gate_table()'s: the always-gates, plus these claims' gates.
    bool tools = false;               // the recipe claims tool calling: the tool-call gate runs
    std::optional<std::int64_t> needle_context;  // tokens: the needle gate runs up to this context
    std::vector<double> needle_depths{0.25, 0.5, 0.75};
    int concurrency = 1;              // the requirement's concurrency (speed is measured at 1 and at this)
    int max_tokens = 32;              // per generation request
    std::chrono::milliseconds request_timeout{std::chrono::seconds(120)};
    int quality_positions = 8;        // next-token distributions sampled per quality prompt
    int top_logprobs = 5;
    // The recipe claims its engine honours response_format {"type": "json_object"} (capabilities.
    // structured_output; vLLM, SGLang, llama.cpp and anvil-engine do): the json gate then also
    // requires the answer itself to parse. Without
    // it the gate checks what every OpenAI engine owes regardless of the model's skill: the body
    // and every SSE chunk of a streamed reply are valid JSON in OpenAI's shapes, ending in [DONE].
    bool constrained_json = false;
    // Fixed work for the speed measurements. Keep them equal across the contenders compared: the
    // receipts record them, and a candidate measured on less work would look faster.
    int task_max_tokens = 64;         // per warm e2e task (4 tasks)
    int warm_e2e_passes = 3;          // passes of the warm task set at least: the median pass is the figure;
    double warm_e2e_min_seconds = 3;  // more passes (25 at most) while they add up to less than this
    int decode_tokens = 64;           // per decode-speed stream
    int prefill_tokens = 1024;        // the long prompt's target length (capped at half the model's context)
    // Set from another thread to cut the run short (anvild stopping): every request not yet sent
    // fails at once as "cancelled", a stream in progress is dropped, and qualify() throws
    // Cancelled instead of writing a receipt.
    const std::atomic<bool>* cancelled = nullptr;
};

struct Cancelled : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct GateOutcome {
    std::string gate;  // a name from state::gate_table(): identity | smoke | json | determinism | tools | needle
    int passed = 0;
    int attempts = 0;
    bool pass = false;  // passed / attempts >= min_pass_rate
    std::vector<std::string> reasons;  // why attempts failed, one line each
};

struct Measurement {
    Measurement() = default;
    Measurement(std::string name, double v, std::string u) : metric(std::move(name)), value(v), unit(std::move(u)) {}
    // A measurement of a catalogued metric: its name and unit from the catalogue (metrics_catalogue.hpp).
    Measurement(const Metric& m, double v) : metric(m.name), value(v), unit(m.unit) {}
    std::string metric;  // ttft_seconds, prefill_tokens_per_second, decode_tokens_per_second_c1,
                         // decode_tokens_per_second_cN, warm_e2e_seconds, tasks_per_hour, peak_memory_bytes;
                         // with control samples and a complete comparison also relative_quality_loss,
                         // mean_kl and top1_agreement; from an engine that reports its draft's counters
                         // (draft_acceptance.hpp) draft_proposed_tokens, draft_accepted_tokens,
                         // draft_acceptance_ratio and draft_mean_accepted_tokens; from anvil-engine on a
                         // GPU gpu_memory_bytes
    double value = 0;
    std::string unit;    // seconds | tokens/s | tasks/h | bytes | ratio | nats | tokens
};

// How the candidate's next-token distributions compare with the control's at the same prefixes.
struct QualityComparison {
    double mean_kl = 0;          // mean KL(control ‖ candidate) over sampled positions, in nats
    double top1_agreement = 0;   // share of positions where both put the same token first
    double quality_score = 0;    // exp(-mean_kl) × top1_agreement: 1 for an identical engine
    double relative_quality_loss = 0;  // 1 - quality_score (the control's own score is 1)
    std::size_t positions = 0;          // positions compared (present in both sample sets)
    std::size_t control_positions = 0;  // positions the control offered: fewer compared is incomplete
    bool complete() const { return positions > 0 && positions == control_positions; }
};

struct Report {
    std::vector<GateOutcome> gates;
    std::vector<Measurement> measurements;
    // The prefixes and next-token top_logprobs sampled from this engine. A control's samples are
    // what later candidates are compared against (they are replayed, so the control need not run).
    nlohmann::json quality_samples;
    std::optional<QualityComparison> quality;  // when control samples were given
    std::filesystem::path receipt_path;
    std::string receipt_sha256;
    std::string started_at, finished_at;

    // Every hard gate of state::gate_table() that ran passed, and the ones every plan runs did run.
    bool hard_gates_passed() const;
    const GateOutcome* find_gate(std::string_view gate) const;  // nullptr when it did not run
    const Measurement* find(const std::string& metric) const;
};

// Runs the gates and measurements against `target`. With `control_samples` (a control's
// Report::quality_samples), the same prefixes are replayed and compared; without, this engine's
// samples are drawn fresh (it is, or may become, the control). The receipt is written atomically
// (temporary file, fsync, rename) as <receipts_dir>/<recipe id>-<revision id>-<time>.json.
// Throws only when the receipt cannot be written; engine failures are failed gates.
Report qualify(const Target& target, const Plan& plan, const std::filesystem::path& receipts_dir,
               const std::optional<nlohmann::json>& control_samples = std::nullopt);

QualityComparison compare_quality(const nlohmann::json& control_samples, const nlohmann::json& candidate_samples);

}  // namespace anvil::qualify
