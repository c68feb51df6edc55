// The engine: a loaded model plus the one thread that owns the batch. HTTP threads submit
// tokenized requests and read their streams; the engine thread schedules, runs the model,
// samples, detokenizes and checks stop conditions.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/active_request.hpp"
#include "engine/block_manager.hpp"
#include "engine/chat_template.hpp"
#include "engine/choices.hpp"
#include "engine/config.hpp"
#include "engine/draft.hpp"
#include "engine/json_grammar.hpp"
#include "engine/metrics.hpp"
#include "engine/runner.hpp"
#include "engine/request_stream.hpp"
#include "engine/sampler.hpp"
#include "engine/scheduler.hpp"
#include "engine/speculator.hpp"
#include "engine/token_mask.hpp"
#include "engine/tokenizer.hpp"
#include "engine/weights.hpp"

namespace anvil::engine {

struct EngineOptions {
    int max_seqs = 4;
    int max_context = 2048;      // 0: the model's own, within what the KV pool holds (resolved_max_context)
    int max_batch_tokens = 256;  // tokens per forward pass: the prefill chunk
    int kv_blocks = 0;           // 0: enough for max_seqs full contexts, within 4 GiB
    int block_size = 16;
    WeightFormat weights = WeightFormat::Stored;
    kernels::KvType kv_type = kernels::KvType::F32;
    uint64_t seed = 0;           // seeds requests that bring none, in arrival order
    int threads = 0;             // OpenMP threads for the model; 0: every core
    DraftOptions draft;          // speculative decoding: what proposes tokens (none by default)
    bool prefix_caching = true;  // a prompt's leading full blocks come from the cache when they are there
    std::string device = "cpu";  // cpu, or cuda:N (runner.hpp)
    // On a GPU without kv_blocks: the share of its memory weights, activations and cache may take.
    double gpu_memory_utilization = 0.9;
};

// The context an engine with these options serves on a model of this configuration: max_context,
// or when it is 0 the model's own, cut to what one sequence's share of the KV pool holds.
int resolved_max_context(const EngineOptions& options, const ModelConfig& config);  // logs nothing

// A request the client got wrong: the server answers 400 with the message.
struct InvalidRequest : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

class Engine {
public:
    Engine(const std::filesystem::path& model_dir, const EngineOptions& options);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Queues a request for `n` choices: n sequences of the same prompt, sampled independently,
    // writing into one stream (events carry the choice's index). Choice i's generator is seeded
    // from the request's seed and i, so a seeded choice is reproducible; choice 0 is what n = 1
    // gives. With prefix caching, choices after the first wait until the first has computed the
    // prompt, then take its full blocks from the cache; without it each computes the prompt.
    // Throws InvalidRequest for an empty prompt, a prompt that does not leave room for one token
    // in the context, one the KV cache could never hold, a token id (of the prompt or of
    // params.logit_bias) outside the vocabulary, or n outside 1..max_seqs.
    std::shared_ptr<RequestStream> submit(std::vector<int32_t> prompt, SamplingParams params, int n = 1);

    const ModelConfig& config() const { return config_; }
    const Tokenizer& tokenizer() const { return tokenizer_; }
    // The chat template, or the reason there is none.
    const ChatTemplate* chat_template() const { return chat_template_ ? &*chat_template_ : nullptr; }
    const std::string& chat_template_error() const { return chat_template_error_; }
    const EngineOptions& options() const { return options_; }
    Metrics& metrics() { return metrics_; }
    size_t weight_bytes_per_token() const { return weight_bytes_per_token_; }
    std::string device() const { return runner_->device(); }  // "cpu", or "cuda:N (name)"
    // GPU memory the target's and the draft's runners allocated; 0 on the CPU.
    size_t device_bytes() const { return runner_->device_bytes() + (speculator_ ? speculator_->device_bytes() : 0); }

    // What the draft's own weights hold: 0 without one, or when it is the target's own tensors
    // (a self draft in the target's format).
    size_t draft_weight_bytes() const { return draft_weight_bytes_; }
    const DraftOptions& draft() const { return options_.draft; }

private:
    using Active = ActiveRequest;
    void loop();
    // One step of the batch: schedule (which sequences, how many tokens each, drafts proposed),
    // run (the batch through the target's runner once), sample (prompt logprobs, then each
    // sequence's tokens, drafts verified) and emit (each token to its stream).
    void step();
    const std::vector<ScheduledChunk>& schedule();
    void run(const std::vector<ScheduledChunk>& plan);
    void sample(const std::vector<ScheduledChunk>& plan);
    void accept_new();
    void finish(Active& active, const std::string& reason);
    // Sends a sampled token; true when it ended the sequence (which is then erased).
    bool emit_token(Active& active, int32_t token, const float* logits);
    // The logits with every token the sequence's grammar refuses at -inf (in sampler scratch), or
    // null when the grammar allows no token at all.
    const float* constrain(Active& active, const float* logits);

    // Loading the draft (engine_draft.cpp): the target's and the draft's weights (read_draft: the
    // draft's config and weights; before any runner, so that a GPU target can leave the draft's
    // share of the device), then the runners and the speculator.
    std::unique_ptr<ModelWeights> read_weights(const std::filesystem::path& model_dir);
    void read_draft(const std::filesystem::path& model_dir, const ModelWeights& target);
    std::unique_ptr<Runner> make_target_runner();
    void start_draft();
    RunnerOptions draft_runner_options(const RunnerOptions& target) const;

    EngineOptions options_;
    ModelConfig config_;
    Tokenizer tokenizer_;
    std::optional<ChatTemplate> chat_template_;
    std::string chat_template_error_;
    // The draft's config (--draft-model) and weights (--draft-self, --draft-model): read with the
    // target's, before the runners. No weights when a self draft is the target's own tensors.
    std::optional<ModelConfig> draft_config_;
    std::unique_ptr<ModelWeights> draft_weights_;
    bool draft_shares_weights_ = false;
    // On a GPU both are released once the runners have uploaded them: the host keeps no copy.
    std::unique_ptr<ModelWeights> weights_;
    size_t weight_bytes_per_token_ = 0, draft_weight_bytes_ = 0;  // what they were
    std::unique_ptr<Runner> runner_;
    BlockManager blocks_;  // as many blocks as the runner's cache holds
    Scheduler scheduler_;
    Metrics metrics_;
    std::vector<int32_t> stop_ids_;
    SamplerScratch sampler_scratch_;
    std::unique_ptr<VocabularyTrie> vocabulary_trie_;  // built for the first constrained request
    TokenMask token_mask_;
    Batch batch_;
    struct Sampled {
        uint64_t id;
        int row;     // its first logits row
        int drafts;  // draft tokens verified after that row
    };
    std::vector<Sampled> sampled_;  // this step's sequences that sample
    struct Prompted {
        uint64_t id;
        int row;    // its first logits row
        int start;  // the prompt position of that row
        int rows;
    };
    std::vector<Prompted> prompted_;  // this step's sequences with prompt logprobs to report
    // Logits rows a step may spend on prompt logprobs, beyond the sampling and draft rows: a
    // prompt that wants them is prefilled in chunks of at most this many positions.
    static constexpr int kPromptLogitRows = 32;
    void report_prompt_logprobs(const Prompted& p);

    // Drafts and verifies for the running sequences (speculator.hpp); none without a draft.
    std::unique_ptr<Speculator> speculator_;

    std::mutex mutex_;  // guards incoming_ and stopping_
    std::condition_variable wake_;
    std::vector<std::unique_ptr<Active>> incoming_;
    bool stopping_ = false;
    std::atomic<bool> cancel_pending_{false};
    uint64_t next_id_ = 0;  // guarded by mutex_
    ActiveRequests active_;  // engine thread only
    HeldChoices held_;  // later choices waiting for their first choice's prompt
    std::thread thread_;
};

}  // namespace anvil::engine
