// Speculative decoding inside continuous batching. Each step, every decoding sequence with room
// gets up to K draft tokens (the scheduler reserves their blocks and batch tokens); the drafts of
// all sequences are proposed together, one draft forward per draft position; then the target's one
// forward of the whole batch verifies them (K + 1 logits rows per sequence), and each sequence
// keeps the prefix the speculative rule accepts plus one token of the target's own. Rejected
// tokens' cache slots are simply not counted as computed, and their blocks go back to the pool.
#include "engine/speculator.hpp"

#include <algorithm>
#include <chrono>

#include "engine/speculative_rule.hpp"

namespace anvil::engine {

Speculator::Speculator(const DraftOptions& draft, Limits limits, std::unique_ptr<Runner> draft_runner, Metrics& metrics,
                       SamplerScratch& scratch)
    : draft_(draft), limits_(limits), draft_runner_(std::move(draft_runner)), metrics_(metrics), scratch_(scratch) {
    target_probs_.resize(size_t(limits_.vocab));
    residual_.resize(size_t(limits_.vocab));
    draft_batch_.reserve(limits_.max_batch_tokens, limits_.max_seqs, limits_.max_seqs);
    drafting_.reserve(size_t(limits_.max_seqs));
    next_.reserve(size_t(limits_.max_seqs));
    rows_.reserve(size_t(limits_.max_seqs));
}

void Speculator::set_lookahead(ActiveRequests& requests) const {
    // No draft past what the request may still generate (the target adds one token of its own)
    // or past the context.
    for (auto& [id, active] : requests) {
        Sequence& s = active->sequence;
        if (active->matcher) {  // its next tokens depend on each one before them: no draft
            s.lookahead = 0;
            continue;
        }
        s.lookahead = std::max(0, std::min({draft_.tokens, active->params.max_tokens - active->generated - 1,
                                            limits_.max_context - int(s.tokens.size())}));
    }
}

void Speculator::propose(const std::vector<ScheduledChunk>& plan, ActiveRequests& requests, Runner& target, BlockManager& blocks) {
    const auto started = std::chrono::steady_clock::now();
    drafting_.clear();
    for (const ScheduledChunk& c : plan) {
        c.sequence->drafts.clear();
        if (c.draft <= 0) continue;
        const auto it = requests.find(c.sequence->id);
        if (it != requests.end()) drafting_.push_back({it->second.get(), c.draft});
    }
    if (drafting_.empty()) return;
    switch (draft_.kind) {
        case DraftKind::Ngram:
            for (const Drafting& d : drafting_)
                propose_ngram(d.active->sequence.tokens, draft_.ngram, d.tokens, d.active->sequence.drafts);
            break;
        case DraftKind::Layers: propose_with_model(target, draft_.layers); break;
        case DraftKind::Self:
        case DraftKind::Model: propose_with_model(*draft_runner_, 0); break;
        case DraftKind::None: break;
    }
    // Positions reserved for drafts that were not proposed (prompt lookup found no match) go back
    // now: no verification will return them, and a sequence must not hold them into the next step.
    for (const Drafting& d : drafting_) {
        Sequence& s = d.active->sequence;
        blocks.shrink(s.blocks, int(s.tokens.size() + s.drafts.size()));
    }
    metrics_.draft_microseconds += uint64_t(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started).count());
}

int32_t Speculator::draft_token(ActiveRequest& active, const Runner& runner, int row, int step) {
    if (active.sequence.draft_largest_only) return runner.argmax(row);
    const int vocab = limits_.vocab;
    const float* logits = apply_logit_bias(runner.logits(row), vocab, active.params.logit_bias, scratch_);
    if (is_greedy(active.params)) return argmax_token(logits, vocab);
    // Sampling: the draft samples from its own distribution with the request's parameters, and
    // keeps that distribution for the rule.
    active.draft_probs.resize(size_t(draft_.tokens) * size_t(vocab));
    float* q = active.draft_probs.data() + size_t(step) * size_t(vocab);
    sampling_distribution(logits, vocab, active.params, scratch_, q);
    return draw_from(q, vocab, active.rng);
}

void Speculator::propose_with_model(Runner& runner, int exit_after) {
    // First the tokens the draft has not seen, up to and including the sequence's last; for the
    // early exit that is only the last (its cache is the target's), for a draft model with its own
    // cache also what the target accepted last step, or a whole prompt. The logits after the last
    // give the first draft token.
    const bool own_cache = exit_after == 0;
    std::vector<int>& next = next_;
    next.clear();
    for (const Drafting& d : drafting_) {
        const Sequence& s = d.active->sequence;
        next.push_back(own_cache ? s.draft_computed : int(s.tokens.size()) - 1);
    }
    const int budget_per_forward = limits_.max_batch_tokens;
    for (;;) {
        draft_batch_.clear();
        int budget = budget_per_forward;
        std::vector<int>& rows = rows_;
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
                ActiveRequest& a = *drafting_[i].active;
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

void Speculator::verify(ActiveRequest& active, const Runner& target, int first_row, BlockManager& blocks, const Emit& emit) {
    Sequence& s = active.sequence;
    const int vocab = limits_.vocab;
    const int k = int(s.drafts.size());
    const bool greedy = is_greedy(active.params);
    // A prompt-lookup draft is a point mass; a model draft sampled from the distribution it kept.
    const bool point_mass = draft_.kind == DraftKind::Ngram;
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
            token = target.argmax(first_row + i);
            keep = i < k && token == s.drafts[size_t(i)];
        } else {
            logits = apply_logit_bias(target.logits(first_row + i), vocab, active.params.logit_bias, scratch_);
            if (i == k) {
                token = sample_token(logits, vocab, active.params, active.rng, scratch_);
            } else if (greedy) {
                token = argmax_token(logits, vocab);
                keep = token == s.drafts[size_t(i)];
            } else {
                sampling_distribution(logits, vocab, active.params, scratch_, target_probs_.data());
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
        if (emit(active, token, logits)) return;  // finished: the sequence and its blocks are gone
        if (!keep) break;
    }
    s.drafts.clear();
    // The rejected tokens' slots: beyond `computed` nothing reads them, and their blocks go back.
    blocks.shrink(s.blocks, int(s.tokens.size()));
    s.draft_computed = std::min(s.draft_computed, s.computed);
}

}  // namespace anvil::engine
