// Continuous batching, as bookkeeping only: which sequences run this step and which of their
// tokens go into the batch. It owns no tensors and computes nothing; the engine asks it for a
// plan, runs the model on it, and reports back.
//
// Each step: every running sequence that is decoding feeds its one new token; sequences still in
// their prompt feed a chunk; then waiting sequences are admitted first come, first served while
// there are sequence slots, batch tokens and free KV blocks for their whole prompt. A request that
// does not fit waits. When a decoding sequence needs a block and none is free, the most recently
// admitted sequence is preempted: its blocks are freed and it will be recomputed from its tokens.
// A decoding sequence with a lookahead also gets blocks and batch tokens for that many draft
// tokens when they are free; speculation never preempts anyone. The engine returns the blocks of
// rejected draft tokens after verification (BlockManager::shrink).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "engine/block_manager.hpp"

namespace anvil::engine {

struct Sequence {
    uint64_t id = 0;
    std::vector<int32_t> tokens;  // the prompt, then each generated token
    int prompt_tokens = 0;
    int computed = 0;             // leading tokens whose keys and values are in the cache
    std::vector<int32_t> blocks;  // the cache blocks holding them, in position order
    uint64_t admitted_order = 0;  // when it last entered the running set
    // Speculative decoding: at most this many draft tokens may follow the next decode step (set
    // by the engine before each schedule), the draft tokens proposed for it, and the leading
    // tokens a draft model with its own cache has computed (0 after preemption).
    int lookahead = 0;
    std::vector<int32_t> drafts;
    int draft_computed = 0;
    // Prompt logprobs: the next prompt position whose logits (the distribution of the token after
    // it) are still wanted; -1 when none are. Unlike `computed` it survives preemption: a position
    // is reported once.
    int prompt_logits_next = -1;
    // Prefix caching: the names of its leading full blocks (BlockManager).
    std::vector<uint64_t> block_hashes;
    // Its sampling reads only each row's largest logit (greedy, no logprobs, bias or grammar), and
    // its draft's, when it has one (greedy, no bias): a GPU copies back the token, not the row.
    bool largest_only = false;
    bool draft_largest_only = false;
};

struct ScheduledChunk {
    Sequence* sequence;
    int start;    // first position fed
    int count;    // positions fed
    bool logits;  // the chunk reaches the last token: sample after it
    int draft = 0;  // positions reserved (blocks and batch tokens) for draft tokens after it
    // Prompt logprobs: logits rows for positions prompt_row_start .. prompt_row_start + prompt_rows - 1
    int prompt_row_start = 0;
    int prompt_rows = 0;
};

class Scheduler {
public:
    // `prompt_logit_rows`: logits rows a step may spend on prompt logprobs, over all sequences;
    // a prompt that wants them is fed in chunks no longer than what is left of that.
    Scheduler(int max_seqs, int max_batch_tokens, BlockManager& blocks, int prompt_logit_rows = 0);

    void add(Sequence* sequence);  // joins the waiting queue
    // Removes a finished or cancelled sequence wherever it is and frees its blocks.
    void remove(Sequence* sequence);
    // This step's plan; the vector is reused across steps.
    const std::vector<ScheduledChunk>& schedule();
    // After the model ran the plan: the chunks' positions are in the cache.
    void commit();

    size_t waiting() const { return waiting_.size(); }
    size_t running() const { return running_.size(); }
    uint64_t preemptions() const { return preemptions_; }
    // Prefix caching: prompt positions looked up at admission, and those found.
    uint64_t prefix_queries() const { return prefix_queries_; }
    uint64_t prefix_hits() const { return prefix_hits_; }
    // A prompt this long can never be admitted: the cache is smaller than it.
    bool fits_ever(int tokens) const { return blocks_.blocks_for(tokens + 1) <= blocks_.total(); }

private:
    void preempt(Sequence* victim);

    int max_seqs_;
    int max_batch_tokens_;
    int prompt_logit_rows_;
    BlockManager& blocks_;
    std::deque<Sequence*> waiting_;
    std::vector<Sequence*> running_;
    std::vector<ScheduledChunk> plan_;
    uint64_t admissions_ = 0;
    uint64_t preemptions_ = 0;
    uint64_t prefix_queries_ = 0, prefix_hits_ = 0;
};

}  // namespace anvil::engine
