// Speculative decoding inside continuous batching. Each step, every decoding sequence with room
// gets up to K draft tokens (the scheduler reserves their blocks and batch tokens); the drafts of
// all sequences are proposed together, one draft forward per draft position; then the target's one
// forward of the whole batch verifies them (K + 1 logits rows per sequence), and each sequence
// keeps the prefix the speculative rule accepts plus one token of the target's own. Rejected
// tokens' cache slots are simply not counted as computed, and their blocks go back to the pool.
#include <algorithm>
#include <chrono>

#include <spdlog/spdlog.h>

#include "engine/engine.hpp"
#include "engine/speculative_rule.hpp"

namespace anvil::engine {

void Engine::read_draft(const std::filesystem::path& model_dir, const ModelWeights& target) {
    const DraftOptions& d = options_.draft;
    if (d.kind != DraftKind::Self && d.kind != DraftKind::Model) return;
    const ModelConfig* config = &config_;
    std::filesystem::path dir = model_dir;
    if (d.kind == DraftKind::Model) {
        require_same_tokenizer(model_dir, d.model_dir);
        draft_config_ = load_config(d.model_dir);
        if (draft_config_->vocab_size != config_.vocab_size)
            throw std::runtime_error("--draft-model " + d.model_dir.string() + ": vocab_size " +
                                     std::to_string(draft_config_->vocab_size) + ", the target's is " +
                                     std::to_string(config_.vocab_size) + "; their logits must cover the same tokens");
        if (draft_config_->max_position < options_.max_context)
            throw std::runtime_error("--draft-model " + d.model_dir.string() + ": context length " +
                                     std::to_string(draft_config_->max_position) + " is below --max-context " +
                                     std::to_string(options_.max_context));
        config = &*draft_config_;
        dir = d.model_dir;
    }
    // A self draft held as the target is held is the target's tensors: it runs on them, nothing
    // copied, on the CPU and on a GPU alike (as the paper's memory counts it,
    // registry/embedded_memory.cpp). That is the same --weights, the stored bf16 values kept by
    // both, or q8 from a GGUF Q8_0 file that is q8 already.
    using kernels::WeightType;
    const WeightType held = target.layers.front().wq.type;
    const bool q8_held = held == WeightType::Q8 || held == WeightType::Q8Packed || held == WeightType::Q8Packed8;
    draft_shares_weights_ = d.kind == DraftKind::Self &&
                            (d.weights == options_.weights || (d.weights == WeightFormat::Q8 && q8_held) ||
                             (d.weights == WeightFormat::BF16 && held == WeightType::BF16 && target.kept_as_stored()));
    if (!draft_shares_weights_)
        draft_weights_ = std::make_unique<ModelWeights>(*config, dir, d.weights, weight_home(options_.device));
}

RunnerOptions Engine::draft_runner_options(const RunnerOptions& target) const {
    // The draft's cache has the target's blocks, so that one block table serves both.
    RunnerOptions r = target;
    r.max_logit_rows = options_.max_seqs;
    r.companion_bytes = 0;
    r.companion_block_bytes = 0;
    return r;
}

void Engine::start_draft() {
    const DraftOptions& d = options_.draft;
    metrics_.draft_kind = draft_kind_name(d.kind);
    if (d.kind == DraftKind::None) return;
    target_probs_.resize(size_t(config_.vocab_size));
    residual_.resize(size_t(config_.vocab_size));
    draft_batch_.reserve(options_.max_batch_tokens, options_.max_seqs, options_.max_seqs);
    drafting_.reserve(size_t(options_.max_seqs));
    scratch_next_.reserve(size_t(options_.max_seqs));
    scratch_rows_.reserve(size_t(options_.max_seqs));
    if (d.kind == DraftKind::Layers || d.kind == DraftKind::Ngram) {
        spdlog::info("draft: {} {}, {} tokens a step", draft_kind_name(d.kind), d.kind == DraftKind::Layers ? d.layers : d.ngram,
                     d.tokens);
        return;
    }
    const ModelConfig& config = draft_config_ ? *draft_config_ : config_;
    // The target's options hold its resolved block count: the draft's cache takes as many, within
    // the share the target left for it on a GPU.
    draft_runner_ = make_runner(options_.device, config, draft_shares_weights_ ? *weights_ : *draft_weights_,
                                draft_runner_options(runner_->options()), draft_shares_weights_ ? runner_.get() : nullptr);
    spdlog::info("draft: {} ({} layers, dim {}, {} weights{}, {} MB cache), {} tokens a step", draft_kind_name(d.kind),
                 config.n_layers, config.dim, weight_format_name(d.weights), draft_shares_weights_ ? ", the target's" : "",
                 draft_runner_->kv_bytes() >> 20, d.tokens);
}

void Engine::set_lookahead() {
    // No draft past what the request may still generate (the target adds one token of its own)
    // or past the context.
    for (auto& [id, active] : active_) {
        Sequence& s = active->sequence;
        if (active->matcher) {  // its next tokens depend on each one before them: no draft
            s.lookahead = 0;
            continue;
        }
        s.lookahead = std::max(0, std::min({options_.draft.tokens, active->params.max_tokens - active->generated - 1,
                                            options_.max_context - int(s.tokens.size())}));
    }
}

void Engine::propose(const std::vector<ScheduledChunk>& plan) {
    const auto started = std::chrono::steady_clock::now();
    drafting_.clear();
    for (const ScheduledChunk& c : plan) {
        c.sequence->drafts.clear();
        if (c.draft <= 0) continue;
        const auto it = active_.find(c.sequence->id);
        if (it != active_.end()) drafting_.push_back({it->second.get(), c.draft});
    }
    if (drafting_.empty()) return;
    switch (options_.draft.kind) {
        case DraftKind::Ngram:
            for (const Drafting& d : drafting_)
                propose_ngram(d.active->sequence.tokens, options_.draft.ngram, d.tokens, d.active->sequence.drafts);
            break;
        case DraftKind::Layers: propose_with_model(*runner_, options_.draft.layers); break;
        case DraftKind::Self:
        case DraftKind::Model: propose_with_model(*draft_runner_, 0); break;
        case DraftKind::None: break;
    }
    // Positions reserved for drafts that were not proposed (prompt lookup found no match) go back
    // now: no verification will return them, and a sequence must not hold them into the next step.
    for (const Drafting& d : drafting_) {
        Sequence& s = d.active->sequence;
        blocks_.shrink(s.blocks, int(s.tokens.size() + s.drafts.size()));
    }
    metrics_.draft_microseconds += uint64_t(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started).count());
}

int32_t Engine::draft_token(Active& active, const Runner& runner, int row, int step) {
    if (active.sequence.draft_largest_only) return runner.argmax(row);
    const int vocab = config_.vocab_size;
    const float* logits = apply_logit_bias(runner.logits(row), vocab, active.params.logit_bias, sampler_scratch_);
    if (is_greedy(active.params)) return argmax_token(logits, vocab);
    // Sampling: the draft samples from its own distribution with the request's parameters, and
    // keeps that distribution for the rule.
    active.draft_probs.resize(size_t(options_.draft.tokens) * size_t(vocab));
    float* q = active.draft_probs.data() + size_t(step) * size_t(vocab);
    sampling_distribution(logits, vocab, active.params, sampler_scratch_, q);
    return draw_from(q, vocab, active.rng);
}

void Engine::propose_with_model(Runner& runner, int exit_after) {
    // First the tokens the draft has not seen, up to and including the sequence's last; for the
    // early exit that is only the last (its cache is the target's), for a draft model with its own
    // cache also what the target accepted last step, or a whole prompt. The logits after the last
    // give the first draft token.
    const bool own_cache = exit_after == 0;
    std::vector<int>& next = scratch_next_;
    next.clear();
    for (const Drafting& d : drafting_) {
        const Sequence& s = d.active->sequence;
        next.push_back(own_cache ? s.draft_computed : int(s.tokens.size()) - 1);
    }
    const int budget_per_forward = options_.max_batch_tokens;
    for (;;) {
        draft_batch_.clear();
        int budget = budget_per_forward;
        std::vector<int>& rows = scratch_rows_;
        rows.assign(drafting_.size(), -1);
        for (size_t i = 0; i < drafting_.size() && budget > 0; ++i) {
            const Sequence& s = drafting_[i].active->sequence;
            const int len = int(s.tokens.size());
            if (next[i] >= len) continue;
            const int n = std::min(len - next[i], budget);
            const auto index = int32_t(draft_batch_.block_tables.size());
            draft_batch_.block_tables.push_back(s.blocks.data());
            for (int p = next[i]; p < next[i] + n; ++p) {
                draft_batch_.tokens.push_back(s.tokens[size_t(p)]);
                draft_batch_.positions.push_back(p);
                draft_batch_.sequence.push_back(index);
            }
            next[i] += n;
            budget -= n;
            if (next[i] == len) {
                rows[i] = int(draft_batch_.logit_tokens.size());
                draft_batch_.logit_tokens.push_back(draft_batch_.size() - 1);
                draft_batch_.largest_only.push_back(s.draft_largest_only);
            }
        }
        if (draft_batch_.size() == 0) break;
        runner.forward(draft_batch_, exit_after);
        for (size_t i = 0; i < drafting_.size(); ++i)
            if (rows[i] >= 0) {
                Active& a = *drafting_[i].active;
                a.sequence.drafts.push_back(draft_token(a, runner, rows[i], 0));
                if (own_cache) a.sequence.draft_computed = int(a.sequence.tokens.size());
            }
    }
    // Then one draft position at a time for every sequence that wants more.
    for (int step = 1;; ++step) {
        draft_batch_.clear();
        for (const Drafting& d : drafting_) {
            const Sequence& s = d.active->sequence;
            if (step >= d.tokens || int(s.drafts.size()) != step) continue;
            const auto index = int32_t(draft_batch_.block_tables.size());
            draft_batch_.block_tables.push_back(s.blocks.data());
            draft_batch_.tokens.push_back(s.drafts.back());
            draft_batch_.positions.push_back(int(s.tokens.size()) + step - 1);
            draft_batch_.sequence.push_back(index);
            draft_batch_.logit_tokens.push_back(draft_batch_.size() - 1);
            draft_batch_.largest_only.push_back(s.draft_largest_only);
        }
        if (draft_batch_.size() == 0) break;
        runner.forward(draft_batch_, exit_after);
        int row = 0;
        for (const Drafting& d : drafting_) {
            Sequence& s = d.active->sequence;
            if (step >= d.tokens || int(s.drafts.size()) != step) continue;
            s.drafts.push_back(draft_token(*d.active, runner, row++, step));
            if (own_cache) s.draft_computed = int(s.tokens.size()) + step;
        }
    }
}

void Engine::verify(Active& active, int first_row) {
    Sequence& s = active.sequence;
    const int vocab = config_.vocab_size;
    const int k = int(s.drafts.size());
    const bool greedy = is_greedy(active.params);
    // A prompt-lookup draft is a point mass; a model draft sampled from the distribution it kept.
    const bool point_mass = options_.draft.kind == DraftKind::Ngram;
    // Counted before any token is sent: a scrape (or a client that has its reply) never sees a
    // verification's accepted tokens without its proposed ones.
    metrics_.draft_proposed += uint64_t(k);
    metrics_.draft_verifications += 1;
    int accepted = 0;
    for (int i = 0; i <= k; ++i) {
        int32_t token;
        bool keep = false;
        const float* logits = nullptr;
        if (s.largest_only) {  // greedy, and nothing reads the row: its largest came back alone
            token = runner_->argmax(first_row + i);
            keep = i < k && token == s.drafts[size_t(i)];
        } else {
            logits = apply_logit_bias(runner_->logits(first_row + i), vocab, active.params.logit_bias, sampler_scratch_);
            if (i == k) {
                token = sample_token(logits, vocab, active.params, active.rng, sampler_scratch_);
            } else if (greedy) {
                token = argmax_token(logits, vocab);
                keep = token == s.drafts[size_t(i)];
            } else {
                sampling_distribution(logits, vocab, active.params, sampler_scratch_, target_probs_.data());
                const float* q = point_mass ? nullptr : active.draft_probs.data() + size_t(i) * size_t(vocab);
                const DraftVerdict verdict = judge_draft(target_probs_.data(), q, vocab, s.drafts[size_t(i)], active.rng,
                                                         residual_.data());
                token = verdict.token;
                keep = verdict.accepted;
            }
        }
        if (keep) {
            ++accepted;
            s.computed += 1;  // the accepted token's keys and values are already in the cache
        }
        metrics_.draft_accepted += keep ? 1 : 0;
        if (emit_token(active, token, logits)) return;  // finished: the sequence and its blocks are gone
        if (!keep) break;
    }
    s.drafts.clear();
    // The rejected tokens' slots: beyond `computed` nothing reads them, and their blocks go back.
    blocks_.shrink(s.blocks, int(s.tokens.size()));
    s.draft_computed = std::min(s.draft_computed, s.computed);
}

}  // namespace anvil::engine
