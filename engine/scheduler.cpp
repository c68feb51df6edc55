#include "engine/scheduler.hpp"

#include <algorithm>
#include <stdexcept>

namespace anvil::engine {

Scheduler::Scheduler(int max_seqs, int max_batch_tokens, BlockManager& blocks, int prompt_logit_rows)
    : max_seqs_(max_seqs), max_batch_tokens_(max_batch_tokens), prompt_logit_rows_(prompt_logit_rows), blocks_(blocks) {
    if (max_seqs <= 0 || max_batch_tokens <= 0) throw std::invalid_argument("scheduler limits must be positive");
    running_.reserve(size_t(max_seqs));
    plan_.reserve(size_t(max_seqs));
}

void Scheduler::add(Sequence* sequence) { waiting_.push_back(sequence); }

void Scheduler::remove(Sequence* sequence) {
    blocks_.release(sequence->blocks);
    sequence->computed = 0;
    sequence->draft_computed = 0;
    running_.erase(std::remove(running_.begin(), running_.end(), sequence), running_.end());
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), sequence), waiting_.end());
}

void Scheduler::preempt(Sequence* victim) {
    blocks_.release(victim->blocks);
    victim->computed = 0;
    victim->draft_computed = 0;
    running_.erase(std::remove(running_.begin(), running_.end(), victim), running_.end());
    waiting_.push_front(victim);
    ++preemptions_;
}

namespace {
// A chunk of `count` positions from `start`, cut so that the prompt positions in it whose logits
// are wanted fit `rows_left`; the rows it takes are recorded in the chunk.
ScheduledChunk chunk_of(Sequence* s, int start, int count, int& rows_left) {
    ScheduledChunk c{s, start, count, false};
    if (s->prompt_logits_next >= 0) {
        const int first = std::max(start, s->prompt_logits_next);
        const int last = s->prompt_tokens - 2;  // the last prompt token's logits are the first sample's
        if (first <= last && first < start + count) {
            if (rows_left <= 0) c.count = std::max(0, first - start);
            else c.count = std::min(count, first - start + rows_left);
            c.prompt_row_start = first;
            c.prompt_rows = std::max(0, std::min(start + c.count - 1, last) - first + 1);
            rows_left -= c.prompt_rows;
        }
    }
    c.logits = c.start + c.count == int(s->tokens.size());
    return c;
}
}  // namespace

const std::vector<ScheduledChunk>& Scheduler::schedule() {
    plan_.clear();
    int budget = max_batch_tokens_;
    int prompt_rows_left = prompt_logit_rows_;

    // Running sequences, oldest first: decoders need a block when they cross into a new one.
    std::sort(running_.begin(), running_.end(),
              [](const Sequence* a, const Sequence* b) { return a->admitted_order < b->admitted_order; });
    for (size_t i = 0; i < running_.size() && budget > 0;) {
        Sequence* s = running_[i];
        const int remaining = int(s->tokens.size()) - s->computed;
        int rows_left = prompt_rows_left;
        const ScheduledChunk chunk = chunk_of(s, s->computed, std::min(remaining, budget), rows_left);
        const int count = chunk.count;
        if (count == 0) {  // its prompt logprobs wait for rows another sequence took this step
            ++i;
            continue;
        }
        if (!blocks_.grow(s->blocks, s->computed + count)) {
            // Free the newest sequence's blocks; if that is this one, it waits its turn again.
            Sequence* victim = running_.back();
            preempt(victim);
            if (victim == s) break;
            continue;
        }
        plan_.push_back(chunk);
        prompt_rows_left = rows_left;
        budget -= count;
        ++i;
    }

    // Admissions: first come, first served; the queue's head blocks those behind it so that a
    // long prompt is not starved by short ones.
    while (budget > 0 && int(running_.size()) < max_seqs_ && !waiting_.empty()) {
        Sequence* s = waiting_.front();
        const int total = int(s->tokens.size());
        // Its leading full blocks from the cache, if they are there; never the last token, whose
        // logits it needs, and never for prompt logprobs, which need every position computed.
        int found = 0;
        if (blocks_.prefix_caching() && s->prompt_logits_next < 0 && s->blocks.empty())
            found = blocks_.match(s->tokens, (total - 1) / blocks_.block_size(), s->blocks, s->block_hashes);
        if (blocks_.blocks_for(total + 1) - found > blocks_.free()) {
            blocks_.release(s->blocks);
            break;
        }
        blocks_.grow(s->blocks, total + 1);
        s->computed = found * blocks_.block_size();
        if (blocks_.prefix_caching()) {
            prefix_queries_ += uint64_t(std::min(total, s->prompt_tokens));
            prefix_hits_ += uint64_t(std::min(s->computed, s->prompt_tokens));
        }
        waiting_.pop_front();
        s->admitted_order = ++admissions_;
        running_.push_back(s);
        const ScheduledChunk chunk = chunk_of(s, s->computed, std::min(total - s->computed, budget), prompt_rows_left);
        if (chunk.count > 0) plan_.push_back(chunk);
        budget -= chunk.count;
    }

    // Draft positions last, from what the budget and the free blocks have left, so that
    // speculation never preempts or delays anyone: only for decoding steps.
    for (auto& chunk : plan_) {
        Sequence* s = chunk.sequence;
        if (budget <= 0) break;
        if (s->lookahead <= 0 || chunk.count != 1 || !chunk.logits || chunk.start + 1 != int(s->tokens.size())) continue;
        int draft = std::min(s->lookahead, budget);
        while (draft > 0 && !blocks_.grow(s->blocks, chunk.start + 1 + draft)) --draft;
        chunk.draft = draft;
        budget -= draft;
    }
    return plan_;
}

void Scheduler::commit() {
    for (const auto& chunk : plan_) {
        Sequence* s = chunk.sequence;
        s->computed = chunk.start + chunk.count;
        blocks_.name_full_blocks(s->tokens, s->computed, s->blocks, s->block_hashes);
    }
}

}  // namespace anvil::engine
