#include "engine/engine.hpp"

#include <algorithm>
#include <chrono>
#include <limits>

#include <spdlog/spdlog.h>

#include "engine/kv_cache.hpp"

namespace anvil::engine {


namespace {

// The KV pool when --kv-blocks does not size it: max_seqs full contexts, within vLLM's CPU default
// of 4 GiB (VLLM_CPU_KVCACHE_SPACE) but never less than one full context.
constexpr size_t kDefaultKvBytes = size_t(4) << 30;

size_t kv_block_bytes(const EngineOptions& o, const ModelConfig& c) {
    const size_t element = o.kv_type == kernels::KvType::BF16 ? 2 : 4;
    return std::max<size_t>(2 * size_t(c.n_layers) * size_t(o.block_size) * size_t(c.kv_dim()) * element, 1);
}

int default_kv_blocks(const EngineOptions& o, const ModelConfig& c) {
    if (o.kv_blocks > 0) return o.kv_blocks;
    const int per_sequence = (o.max_context + o.block_size - 1) / o.block_size + 1;
    const size_t budget = std::max<size_t>(kDefaultKvBytes / kv_block_bytes(o, c), size_t(per_sequence));
    return int(std::min<size_t>(size_t(o.max_seqs) * size_t(per_sequence), budget));
}

// --max-context 0 (not given) is the model's own context length, as vLLM's max_model_len, but no
// longer than one sequence's share of the pool (--kv-blocks, else 4 GiB) can hold: Llama 3.1's
// 131072 positions would otherwise ask for 32 GiB of f32 cache before the first request.
int context_for(const EngineOptions& o, const ModelConfig& c) {
    if (o.max_context != 0) return o.max_context;
    // A GPU sizes its cache from its memory: the model's own context, as vLLM's max_model_len, and
    // the runner refuses to start when the cache cannot hold one of them.
    if (o.device != "cpu" && o.kv_blocks == 0) return c.max_position;
    const size_t pool = o.kv_blocks > 0 ? size_t(o.kv_blocks) : kDefaultKvBytes / kv_block_bytes(o, c);
    // A sequence of n tokens takes ceil(n / block_size) + 1 blocks.
    const size_t fits = pool > 1 ? (pool - 1) * size_t(o.block_size) : 0;
    return size_t(c.max_position) > fits ? int(std::max<size_t>(fits, 2)) : c.max_position;
}

EngineOptions& resolve_context(EngineOptions& o, const ModelConfig& c) {
    const int context = context_for(o, c);
    if (o.max_context == 0 && context < c.max_position)
        spdlog::warn("the model's context of {} tokens needs more KV cache than one sequence's share of the pool holds; "
                     "serving {} tokens (--max-context and --kv-blocks choose)",
                     c.max_position, context);
    o.max_context = context;
    return o;
}

// Length of the longest tail of `text` that begins one of the stop strings.
size_t stop_prefix_tail(const std::string& text, const std::vector<std::string>& stops) {
    size_t hold = 0;
    for (const auto& stop : stops)
        for (size_t k = std::min(stop.size() - 1, text.size()); k > hold; --k)
            if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
                hold = k;
                break;
            }
    return hold;
}

}  // namespace

int resolved_max_context(const EngineOptions& options, const ModelConfig& config) { return context_for(options, config); }

Engine::Engine(const std::filesystem::path& model_dir, const EngineOptions& options)
    : options_(options),
      config_(load_config(model_dir)),
      tokenizer_(Tokenizer::load(model_dir)),
      // options_, config_ and tokenizer_ are made before the weights (the members' order): the
      // context is resolved and the request checked before minutes of reading.
      weights_(read_weights(model_dir)),
      runner_(make_target_runner()),
      blocks_(runner_->options().kv_blocks, options.block_size, options.prefix_caching),
      scheduler_(options.max_seqs, options.max_batch_tokens, blocks_, kPromptLogitRows) {
    try {
        chat_template_ = ChatTemplate::detect(tokenizer_);
    } catch (const std::runtime_error& e) {
        chat_template_error_ = e.what();
        spdlog::warn("chat completions disabled: {}", e.what());
    }
    start_draft();
    weight_bytes_per_token_ = weights_->bytes_per_token();
    draft_weight_bytes_ = draft_weights_ ? draft_weights_->resident_bytes() : 0;
    if (options_.device != "cpu") {
        // The runners hold their own copies on the device: a q8 conversion or the files' mapping
        // would only stay resident here (vLLM keeps none either).
        weights_.reset();
        draft_weights_.reset();
    }

    stop_ids_ = config_.eos_token_ids;
    if (auto eos = tokenizer_.token_id(tokenizer_.eos_token()); eos && !tokenizer_.eos_token().empty()) stop_ids_.push_back(*eos);
    if (chat_template_)
        for (const auto& text : chat_template_->end_of_turn())
            if (auto id = tokenizer_.token_id(text)) stop_ids_.push_back(*id);
    std::sort(stop_ids_.begin(), stop_ids_.end());
    stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()), stop_ids_.end());

    sampler_scratch_.reserve(config_.vocab_size);
    batch_.reserve(options.max_batch_tokens, options.max_seqs, runner_->options().max_logit_rows);
    sampled_.reserve(size_t(options.max_seqs));
    prompted_.reserve(size_t(options.max_seqs));
    metrics_.kv_blocks_total = blocks_.total();
    metrics_.gpu_memory_bytes = device_bytes();
    spdlog::info("engine: {} ({} layers, dim {}) on {}, {} weights, {} KV cache of {} blocks x {} ({} MB), {} sequences x {} "
                 "tokens",
                 architecture_name(config_.arch), config_.n_layers, config_.dim, runner_->device(),
                 weight_format_name(options.weights), kv_type_name(options.kv_type), blocks_.total(), options.block_size,
                 runner_->kv_bytes() >> 20, options.max_seqs, options_.max_context);
    thread_ = std::thread([this] { loop(); });
}

std::unique_ptr<ModelWeights> Engine::read_weights(const std::filesystem::path& model_dir) {
    resolve_context(options_, config_);
    require_device(options_.device);
    if (options_.max_context > config_.max_position)
        throw std::runtime_error("--max-context " + std::to_string(options_.max_context) +
                                 " exceeds the model's context length (" + std::to_string(config_.max_position) + " positions: max_position_embeddings, or a GGUF file's <arch>.context_length)");
    if (tokenizer_.vocab_size() > config_.vocab_size)
        throw std::runtime_error(model_dir.string() + ": tokenizer.json has " + std::to_string(tokenizer_.vocab_size()) +
                                 " tokens but config.json's vocab_size is " + std::to_string(config_.vocab_size));
    options_.draft.validate(config_.n_layers);
    auto weights = std::make_unique<ModelWeights>(config_, model_dir, options_.weights, weight_home(options_.device));
    read_draft(model_dir, *weights);
    return weights;
}

std::unique_ptr<Runner> Engine::make_target_runner() {
    RunnerOptions r;
    r.max_batch_tokens = options_.max_batch_tokens;
    // A speculative step verifies a decoding sequence's draft tokens and the position before them.
    const int draft_tokens = options_.draft.kind == DraftKind::None ? 0 : options_.draft.tokens;
    r.max_logit_rows = options_.max_seqs * (1 + draft_tokens) + kPromptLogitRows;
    r.max_context = options_.max_context;
    // A GPU without --kv-blocks sizes its cache from its free memory (0), and the pool follows it;
    // the draft runner's share of the device is left out of it.
    const bool on_gpu = options_.device != "cpu";
    r.kv_blocks = on_gpu && options_.kv_blocks == 0 ? 0 : default_kv_blocks(options_, config_);
    r.block_size = options_.block_size;
    r.kv_type = options_.kv_type;
    r.threads = options_.threads;
    r.memory_fraction = options_.gpu_memory_utilization;
    const bool draft_runner = options_.draft.kind == DraftKind::Self || options_.draft.kind == DraftKind::Model;
    if (on_gpu && draft_runner) {
        const ModelConfig& draft = draft_config_ ? *draft_config_ : config_;
        const RunnerOptions d = draft_runner_options(r);
        r.companion_bytes = (draft_shares_weights_ ? 0 : device_weight_bytes(draft, *draft_weights_)) + device_working_bytes(draft, d);
        r.companion_block_bytes = device_block_bytes(draft, d);
    }
    return make_runner(options_.device, config_, *weights_, r);
}

Engine::~Engine() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
}

std::shared_ptr<RequestStream> Engine::submit(std::vector<int32_t> prompt, SamplingParams params, int n) {
    if (prompt.empty()) throw InvalidRequest("the prompt is empty");
    const int length = int(prompt.size());
    if (length >= options_.max_context)
        throw InvalidRequest("the prompt has " + std::to_string(length) + " tokens; this server's context is " +
                             std::to_string(options_.max_context) + " tokens, leaving no room to generate. Shorten the prompt");
    if (!scheduler_.fits_ever(length))
        throw InvalidRequest("the prompt needs more KV-cache blocks than this server has (" +
                             std::to_string(blocks_.total()) + " of " + std::to_string(blocks_.block_size()) + " tokens)");
    const auto unknown = [this](const char* field, int32_t t) {
        return InvalidRequest(std::string(field) + ": token id " + std::to_string(t) + " does not exist (the vocabulary has " +
                              std::to_string(config_.vocab_size) + " tokens)");
    };
    for (int32_t t : prompt)
        if (t < 0 || t >= config_.vocab_size) throw unknown("prompt", t);
    for (const LogitBias& b : params.logit_bias)
        if (b.token < 0 || b.token >= config_.vocab_size) throw unknown("logit_bias", b.token);
    if (params.max_tokens <= 0) throw InvalidRequest("max_tokens must be at least 1");
    if (n < 1 || n > options_.max_seqs)
        throw InvalidRequest("n must be between 1 and " + std::to_string(options_.max_seqs) +
                             ": this server runs at most that many sequences at once (--max-seqs)");
    auto stream = std::make_shared<RequestStream>([this] {
        cancel_pending_ = true;
        wake_.notify_all();
    });
    // The n sequences of one request, built before the lock and queued together.
    std::vector<std::unique_ptr<Active>> choices;
    for (int i = 0; i < n; ++i) {
        auto active = std::make_unique<Active>(Active{Sequence{}, params, Rng(0), stream, StreamDecoder(tokenizer_), {}, 0, i, {}, {}, 0});
        active->sequence.tokens = i + 1 < n ? prompt : std::move(prompt);
        active->sequence.prompt_tokens = length;
        // Reserved whole, so that decoding never grows them.
        active->sequence.tokens.reserve(size_t(options_.max_context));
        active->sequence.blocks.reserve(size_t(blocks_.blocks_for(options_.max_context + 1 + kMaxDraftTokens)));
        active->sequence.drafts.reserve(size_t(kMaxDraftTokens));
        if (params.grammar) active->matcher.emplace(params.grammar);
        const bool greedy = is_greedy(params) && params.logit_bias.empty();
        active->sequence.largest_only = greedy && params.logprobs < 0 && !params.grammar;
        active->sequence.draft_largest_only = greedy;
        if (params.prompt_logprobs >= 0) active->sequence.prompt_logits_next = 0;
        choices.push_back(std::move(active));
    }
    // The later choices share the first's prompt: they wait for it in the cache instead of
    // computing it beside it (prompt logprobs need every position computed, so those do not).
    const bool share = blocks_.prefix_caching() && n > 1 && params.prompt_logprobs < 0 && length > blocks_.block_size();
    {
        std::lock_guard<std::mutex> lock(mutex_);
        uint64_t first = 0;
        for (auto& active : choices) {
            active->sequence.id = ++next_id_;
            if (active->index == 0) first = active->sequence.id;
            else if (share) active->behind = first;
            // A client's seed gives choice i its own stream (an odd multiplier, so that no two
            // choices' splitmix64 seedings overlap); without one each sequence takes the next.
            const uint64_t seed = active->params.seed != 0
                                      ? active->params.seed + uint64_t(active->index) * 0xD1B54A32D192ED03ull
                                      : options_.seed * 1000003u + next_id_;
            active->rng = Rng(seed);
            incoming_.push_back(std::move(active));
            metrics_.waiting += 1;
        }
    }
    wake_.notify_all();
    return stream;
}

void Engine::loop() {
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return stopping_ || !incoming_.empty() || cancel_pending_ || !active_.empty(); });
            if (stopping_) break;
        }
        try {
            accept_new();
            step();
        } catch (const std::exception& e) {
            // A failed step poisons every sequence in flight: fail them all rather than hang them.
            spdlog::error("engine step failed: {}", e.what());
            for (auto& [id, active] : active_) {
                StreamEvent event;
                event.index = active->index;
                event.done = true;
                event.finish_reason = "abort";
                event.error = std::string("the engine failed: ") + e.what();
                active->stream->push(std::move(event));
                scheduler_.remove(&active->sequence);
            }
            active_.clear();
            held_.clear();
        }
    }
    for (auto& [id, active] : active_) {
        StreamEvent event;
        event.index = active->index;
        event.done = true;
        event.finish_reason = "abort";
        event.error = "the engine is shutting down";
        active->stream->push(std::move(event));
    }
}

void Engine::accept_new() {
    std::vector<std::unique_ptr<Active>> fresh;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        fresh.swap(incoming_);
    }
    for (auto& a : fresh) {
        Sequence* s = &a->sequence;
        const uint64_t id = s->id;
        const bool held = a->behind != 0;
        active_.emplace(id, std::move(a));
        if (held) held_.hold(id);
        else scheduler_.add(s);
    }
    if (cancel_pending_.exchange(false)) {
        for (auto it = active_.begin(); it != active_.end();) {
            if (it->second->stream->cancelled()) {
                scheduler_.remove(&it->second->sequence);
                // The gauges before the counter: a scrape that sees the abort sees its blocks freed.
                metrics_.kv_blocks_used = blocks_.used();
                metrics_.running = int64_t(scheduler_.running());
                metrics_.waiting = int64_t(scheduler_.waiting());
                metrics_.requests_aborted += 1;
                spdlog::debug("request {} cancelled by its client", it->first);
                it = active_.erase(it);
            } else {
                ++it;
            }
        }
    }
}

void Engine::finish(Active& active, const std::string& reason) {
    StreamEvent event;
    event.index = active.index;
    event.text = active.pending + active.decoder.finish();
    active.pending.clear();
    event.done = true;
    event.finish_reason = reason;
    event.prompt_tokens = active.sequence.prompt_tokens;
    event.completion_tokens = active.generated;
    scheduler_.remove(&active.sequence);
    metrics_.kv_blocks_used = blocks_.used();
    metrics_.running = int64_t(scheduler_.running());
    active.stream->push(std::move(event));
}

bool Engine::emit_token(Active& active, int32_t token, const float* logits) {
    Sequence& s = active.sequence;
    StreamEvent event;
    event.index = active.index;
    GeneratedToken generated{token, 0.0f, {}};
    if (active.params.logprobs >= 0) {
        generated.logprob = token_logprob(logits, config_.vocab_size, token);
        generated.top = top_logprobs(logits, config_.vocab_size, active.params.logprobs);
    }
    event.tokens.push_back(std::move(generated));
    ++active.generated;
    metrics_.generation_tokens += 1;

    std::string reason;
    // A grammar lets an end token through only where the value is whole, ignore_eos or not.
    const bool is_stop_token = (!active.params.ignore_eos || active.matcher) &&
                               std::binary_search(stop_ids_.begin(), stop_ids_.end(), token);
    if (is_stop_token) {
        reason = "stop";
    } else {
        if (active.matcher && !active.matcher->feed(tokenizer_.token_bytes(token))) {
            spdlog::error("request {}: token {} does not fit the response_format grammar; ending the answer", s.id, token);
            active.matcher.reset();
            reason = "stop";
        }
        active.pending += active.decoder.push(token);
        size_t cut = std::string::npos;
        for (const auto& stop : active.params.stop)
            if (!stop.empty()) cut = std::min(cut, active.pending.find(stop));
        if (cut != std::string::npos) {
            active.pending.resize(cut);
            active.decoder = StreamDecoder(tokenizer_);  // the rest of the text is cut off anyway
            reason = "stop";
        } else {
            s.tokens.push_back(token);
            const bool whole = active.matcher && active.matcher->done();  // nothing more may follow
            const bool full = active.generated >= active.params.max_tokens || int(s.tokens.size()) >= options_.max_context;
            if (reason.empty() && whole) reason = "stop";
            if (reason.empty() && full) reason = "length";
        }
    }
    if (reason.empty()) {
        const size_t hold = stop_prefix_tail(active.pending, active.params.stop);
        event.text = active.pending.substr(0, active.pending.size() - hold);
        active.pending.erase(0, active.pending.size() - hold);
        active.stream->push(std::move(event));
        return false;
    }
    // The last token travels with the final event.
    StreamEvent last;
    last.index = active.index;
    last.tokens = std::move(event.tokens);
    active.stream->push(std::move(last));
    const uint64_t id = s.id;
    finish(active, reason);
    active_.erase(id);
    return true;
}

const float* Engine::constrain(Active& active, const float* logits) {
    const auto started = std::chrono::steady_clock::now();
    if (!vocabulary_trie_) {
        vocabulary_trie_ = std::make_unique<VocabularyTrie>(tokenizer_);
        spdlog::info("structured output: a trie of {} nodes over the vocabulary", vocabulary_trie_->nodes());
    }
    const int vocab = config_.vocab_size;
    vocabulary_trie_->allowed(*active.matcher, vocab, token_mask_);
    if (active.matcher->can_end())
        for (int32_t id : stop_ids_)
            if (id < vocab) token_mask_.set(id);
    if (token_mask_.count() == 0) return nullptr;
    sampler_scratch_.reserve(vocab);
    float* out = sampler_scratch_.biased.data();
    if (logits != out) std::copy(logits, logits + vocab, out);
    for (int i = 0; i < vocab; ++i)
        if (!token_mask_.test(i)) out[i] = -std::numeric_limits<float>::infinity();
    metrics_.constrained_tokens += 1;
    metrics_.constraint_microseconds += uint64_t(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started).count());
    return out;
}

void Engine::report_prompt_logprobs(const Prompted& p) {
    auto it = active_.find(p.id);
    if (it == active_.end()) return;
    Active& active = *it->second;
    StreamEvent event = prompt_logprobs_event(active, *runner_, p.row, p.start, p.rows, config_.vocab_size);
    active.sequence.prompt_logits_next = p.start + p.rows;
    active.stream->push(std::move(event));
}

void Engine::step() {
    const std::vector<ScheduledChunk>& plan = schedule();
    if (plan.empty()) return;
    if (speculator_) speculator_->propose(plan, active_, *runner_, blocks_);
    run(plan);
    sample(plan);
    metrics_.kv_blocks_used = blocks_.used();
    metrics_.running = int64_t(scheduler_.running());
}

const std::vector<ScheduledChunk>& Engine::schedule() {
    if (!held_.empty()) held_.release(active_, scheduler_);
    if (speculator_) speculator_->set_lookahead(active_);
    const auto& plan = scheduler_.schedule();
    metrics_.running = int64_t(scheduler_.running());
    metrics_.waiting = int64_t(scheduler_.waiting() + held_.size());
    metrics_.kv_blocks_used = blocks_.used();
    metrics_.kv_blocks_cached = blocks_.cached();
    metrics_.preemptions = scheduler_.preemptions();
    metrics_.prefix_cache_queries = scheduler_.prefix_queries();
    metrics_.prefix_cache_hits = scheduler_.prefix_hits();
    return plan;
}

void Engine::run(const std::vector<ScheduledChunk>& plan) {
    batch_.clear();
    for (size_t i = 0; i < plan.size(); ++i) {
        const ScheduledChunk& c = plan[i];
        batch_.block_tables.push_back(c.sequence->blocks.data());
        const int first = batch_.size();
        for (int p = c.start; p < c.start + c.count; ++p) {
            batch_.tokens.push_back(c.sequence->tokens[size_t(p)]);
            batch_.positions.push_back(p);
            batch_.sequence.push_back(int32_t(i));
        }
        for (int k = 0; k < c.prompt_rows; ++k) {
            batch_.logit_tokens.push_back(first + c.prompt_row_start - c.start + k);
            batch_.largest_only.push_back(0);
        }
        if (c.logits) {
            batch_.logit_tokens.push_back(batch_.size() - 1);
            batch_.largest_only.push_back(c.sequence->largest_only);
        }
        // Draft tokens follow their sequence's last token; the target's logits at each of them
        // verify the next one (and the last gives a token of its own when all are accepted).
        const int end = c.start + c.count;
        for (size_t d = 0; d < c.sequence->drafts.size(); ++d) {
            batch_.tokens.push_back(c.sequence->drafts[d]);
            batch_.positions.push_back(end + int(d));
            batch_.sequence.push_back(int32_t(i));
            batch_.logit_tokens.push_back(batch_.size() - 1);
            batch_.largest_only.push_back(c.sequence->largest_only);
        }
        if (c.start < c.sequence->prompt_tokens)
            metrics_.prompt_tokens += uint64_t(std::min(c.start + c.count, c.sequence->prompt_tokens) - c.start);
    }
    const auto started = std::chrono::steady_clock::now();
    runner_->forward(batch_);
    metrics_.forward_microseconds += uint64_t(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started).count());
    metrics_.engine_steps += 1;
    scheduler_.commit();
}

void Engine::sample(const std::vector<ScheduledChunk>& plan) {
    // Copy out what the sampling needs before finishing sequences changes the plan's owners.
    int row = 0;
    sampled_.clear();
    prompted_.clear();
    for (const auto& c : plan) {
        if (c.prompt_rows > 0) {
            prompted_.push_back({c.sequence->id, row, c.prompt_row_start, c.prompt_rows});
            row += c.prompt_rows;
        }
        if (c.logits) {
            const int drafts = int(c.sequence->drafts.size());
            sampled_.push_back({c.sequence->id, row, drafts});
            row += 1 + drafts;
        }
    }
    // Before any sampling: a sequence's prompt logprobs reach its stream ahead of its first token.
    for (const Prompted& p : prompted_) report_prompt_logprobs(p);
    for (const auto& [id, logits_row, drafts] : sampled_) {
        auto it = active_.find(id);
        if (it == active_.end()) continue;
        Active& active = *it->second;
        if (drafts > 0) {
            speculator_->verify(active, *runner_, logits_row, blocks_,
                                [this](Active& a, int32_t token, const float* logits) { return emit_token(a, token, logits); });
            continue;
        }
        if (active.sequence.largest_only) {
            emit_token(active, runner_->argmax(logits_row), nullptr);
            continue;
        }
        // The bias goes in before everything else, so the reported logprobs include it too.
        const float* logits =
            apply_logit_bias(runner_->logits(logits_row), config_.vocab_size, active.params.logit_bias, sampler_scratch_);
        if (active.matcher && !(logits = constrain(active, logits))) {
            spdlog::warn("request {}: the response_format grammar allows no token of this vocabulary; ending the answer", id);
            finish(active, "stop");
            active_.erase(id);
            continue;
        }
        const int32_t token = sample_token(logits, config_.vocab_size, active.params, active.rng, sampler_scratch_);
        emit_token(active, token, logits);
    }
}

}  // namespace anvil::engine
