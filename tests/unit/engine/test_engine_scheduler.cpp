// The scheduler and block manager as bookkeeping: no model, only sequences, blocks and plans.
#include <catch2/catch.hpp>

#include <numeric>

#include "engine/block_manager.hpp"
#include "engine/scheduler.hpp"
#include "test_engine_helpers.hpp"

using namespace anvil::engine;
using anvil::test::engine::scheduled_sequence;

namespace {

// What the engine does after a forward pass: commit, then one new token per sampled sequence.
void run(Scheduler& scheduler) {
    const auto plan = scheduler.schedule();
    scheduler.commit();
    for (const auto& chunk : plan)
        if (chunk.logits) chunk.sequence->tokens.push_back(2);
}

}  // namespace

TEST_CASE("blocks are handed out and returned exactly", "[engine][scheduler]") {
    BlockManager blocks(4, 16);
    std::vector<int32_t> a, b;
    CHECK(blocks.grow(a, 17));  // two blocks
    CHECK(a.size() == 2);
    CHECK(blocks.grow(a, 32));  // still two
    CHECK(a.size() == 2);
    CHECK_FALSE(blocks.grow(b, 48));  // three more than the two left: refused whole
    CHECK(b.empty());
    CHECK(blocks.free() == 2);
    CHECK(blocks.grow(b, 20));
    CHECK(blocks.free() == 0);
    blocks.release(a);
    CHECK(a.empty());
    CHECK(blocks.free() == 2);
    std::vector<int32_t> all = b;
    CHECK(blocks.grow(all, 64));
    std::sort(all.begin(), all.end());
    CHECK(all == std::vector<int32_t>{0, 1, 2, 3});
}

TEST_CASE("prompts are prefilled in chunks within the token budget, beside decoding sequences", "[engine][scheduler]") {
    BlockManager blocks(64, 16);
    Scheduler scheduler(4, 10, blocks);
    Sequence a = scheduled_sequence(1, 4), b = scheduled_sequence(2, 25);
    scheduler.add(&a);
    scheduler.add(&b);
    auto plan = scheduler.schedule();
    REQUIRE(plan.size() == 2);
    CHECK(plan[0].sequence == &a);
    CHECK(plan[0].count == 4);
    CHECK(plan[0].logits);
    CHECK(plan[1].sequence == &b);
    CHECK(plan[1].start == 0);
    CHECK(plan[1].count == 6);  // 10-token budget
    CHECK_FALSE(plan[1].logits);
    scheduler.commit();
    a.tokens.push_back(2);
    plan = scheduler.schedule();  // a decodes one token, b continues its prompt
    REQUIRE(plan.size() == 2);
    CHECK(plan[0].sequence == &a);
    CHECK(plan[0].start == 4);
    CHECK(plan[0].count == 1);
    CHECK(plan[1].start == 6);
    CHECK(plan[1].count == 9);
    scheduler.commit();
    a.tokens.push_back(2);
    plan = scheduler.schedule();
    CHECK(plan[1].start == 15);
    CHECK(plan[1].count == 9);
    scheduler.commit();
    a.tokens.push_back(2);
    plan = scheduler.schedule();
    CHECK(plan[1].start == 24);
    CHECK(plan[1].count == 1);
    CHECK(plan[1].logits);  // the prompt's last token: b samples now
}

TEST_CASE("a request waits, first come first served, until the cache has blocks for it", "[engine][scheduler]") {
    BlockManager blocks(4, 16);
    Scheduler scheduler(8, 256, blocks);
    Sequence a = scheduled_sequence(1, 40), b = scheduled_sequence(2, 5), c = scheduled_sequence(3, 5);  // a needs 3 blocks
    scheduler.add(&a);
    scheduler.add(&b);
    scheduler.add(&c);
    run(scheduler);
    CHECK(scheduler.running() == 2);  // a (3 blocks) and b (1 block); c waits
    CHECK(scheduler.waiting() == 1);
    CHECK(blocks.free() == 0);
    scheduler.remove(&a);  // a finishes
    CHECK(blocks.free() == 3);
    run(scheduler);
    CHECK(scheduler.running() == 2);
    CHECK(scheduler.waiting() == 0);
    CHECK_FALSE(scheduler.fits_ever(64));  // 65 positions need 5 of 4 blocks
    CHECK(scheduler.fits_ever(63));
}

TEST_CASE("when decoding runs out of blocks the newest sequence is preempted and recomputed later", "[engine][scheduler]") {
    BlockManager blocks(3, 4);
    Scheduler scheduler(4, 64, blocks);
    Sequence a = scheduled_sequence(1, 3), b = scheduled_sequence(2, 3);  // each admitted with one block (4 positions)
    scheduler.add(&a);
    scheduler.add(&b);
    run(scheduler);  // both prefilled, one token each: 4 tokens, 3 computed
    run(scheduler);  // position 3 still in the first block: 5 tokens, 4 computed
    CHECK(blocks.free() == 1);
    run(scheduler);  // a takes the last block for position 4; b needs one too: b is preempted
    CHECK(scheduler.preemptions() == 1);
    CHECK(scheduler.running() == 1);
    CHECK(scheduler.waiting() == 1);
    CHECK(b.computed == 0);
    CHECK(b.blocks.empty());
    scheduler.remove(&a);
    const auto plan = scheduler.schedule();  // b comes back and recomputes every token it has
    REQUIRE(plan.size() == 1);
    CHECK(plan[0].sequence == &b);
    CHECK(plan[0].start == 0);
    CHECK(plan[0].count == int(b.tokens.size()));
    CHECK(plan[0].logits);
}
