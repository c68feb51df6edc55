// Speculative decoding and the KV cache: a decoding sequence's lookahead reserves draft positions
// from the budget and only free blocks, never preempts and never holds back an admission; blocks a
// step did not use go back at once. On real test models and the real scheduler and Engine.
#include <catch2/catch.hpp>

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/block_manager.hpp"
#include "engine/draft.hpp"
#include "engine/engine.hpp"
#include "engine/make_model.hpp"
#include "engine/scheduler.hpp"
#include "engine/server.hpp"
#include "speculative_fixture.hpp"
#include "test_engine_helpers.hpp"
#include "test_engine_served.hpp"
#include "test_support.hpp"

// The cases sit in the fixture's namespace: in a unity build another file's helpers of the same
// names stay out of their way.
namespace anvil::test::speculative {

// =============================================================================================
// 2. The KV cache: draft blocks only from free blocks, never a preemption, returned when rejected.

TEST_CASE("speculative scheduler: a decoding sequence's lookahead reserves draft positions from the budget and free blocks "
          "left after everyone's needs",
          "[speculative][scheduler]") {
    BlockManager blocks(16, 4);
    Scheduler scheduler(4, 16, blocks);
    Sequence a = scheduled_sequence(1, 3);
    a.lookahead = 4;
    scheduler.add(&a);
    auto plan = scheduler.schedule();
    REQUIRE(plan.size() == 1);
    CHECK(plan[0].count == 3);
    CHECK(plan[0].draft == 0);  // a prompt's prefill gets no drafts
    scheduler.commit();
    a.tokens.push_back(2);  // 4 tokens, 3 computed
    CHECK(a.blocks.size() == 1);

    plan = scheduler.schedule();
    REQUIRE(plan.size() == 1);
    CHECK(plan[0].start == 3);
    CHECK(plan[0].count == 1);
    CHECK(plan[0].draft == 4);     // positions 4..7
    CHECK(a.blocks.size() == 2);   // 8 positions
    CHECK(blocks.free() == 14);
    scheduler.commit();
    // Verification: 1 of 4 drafts accepted plus the target's own token; the rest go back.
    a.tokens.push_back(2);
    a.tokens.push_back(2);
    a.computed += 1;
    blocks.shrink(a.blocks, int(a.tokens.size()));  // 6 tokens: 2 blocks
    CHECK(a.blocks.size() == 2);

    // A prompt arriving now takes the budget first: 1 for a's decode, 15 for b's prefill, no drafts.
    Sequence b = scheduled_sequence(2, 20);
    b.lookahead = 4;
    scheduler.add(&b);
    plan = scheduler.schedule();
    REQUIRE(plan.size() == 2);
    CHECK(plan[0].sequence == &a);
    CHECK(plan[0].draft == 0);
    CHECK(plan[1].sequence == &b);
    CHECK(plan[1].count == 15);
    CHECK(plan[1].draft == 0);
    CHECK(a.blocks.size() == 2);  // nothing reserved for drafts that did not fit the budget
    scheduler.commit();
    a.tokens.push_back(2);

    // b's last prompt chunk reaches its end (logits) but is a prefill of 5 tokens: no drafts; a's
    // decode gets what is left of the budget: 16 - 1 - 5 = 10, capped by its lookahead 4.
    plan = scheduler.schedule();
    REQUIRE(plan.size() == 2);
    CHECK(plan[0].draft == 4);
    CHECK(plan[1].count == 5);
    CHECK(plan[1].logits);
    CHECK(plan[1].draft == 0);
    scheduler.commit();

    // Lookahead 0 (max_tokens reached next, or no draft): nothing reserved.
    a.lookahead = 0;
    b.lookahead = 0;
    a.tokens.push_back(2);
    b.tokens.push_back(2);
    blocks.shrink(a.blocks, int(a.tokens.size()));
    const int free_before = blocks.free();
    plan = scheduler.schedule();
    for (const auto& c : plan) CHECK(c.draft == 0);
    CHECK(blocks.free() >= free_before - 1);
}

TEST_CASE("speculative scheduler: a one-token prompt's first step may carry drafts, a recomputation may not",
          "[speculative][scheduler]") {
    BlockManager blocks(8, 4);
    Scheduler scheduler(2, 64, blocks);
    Sequence a = scheduled_sequence(1, 1);
    a.lookahead = 3;
    scheduler.add(&a);
    auto plan = scheduler.schedule();
    REQUIRE(plan.size() == 1);
    CHECK(plan[0].count == 1);
    CHECK(plan[0].logits);
    CHECK(plan[0].draft == 3);  // positions 1..3: still the first block
    CHECK(a.blocks.size() == 1);
    scheduler.remove(&a);
    CHECK(blocks.free() == 8);

    // A preempted sequence comes back with all its tokens to recompute: one chunk, no drafts.
    Sequence b = scheduled_sequence(2, 6);
    b.lookahead = 3;
    scheduler.add(&b);
    plan = scheduler.schedule();
    REQUIRE(plan.size() == 1);
    CHECK(plan[0].count == 6);
    CHECK(plan[0].draft == 0);
    CHECK(b.blocks.size() == 2);  // 7 positions: the prompt and the first token
}

TEST_CASE("speculative scheduler: drafts take only free blocks, never preempt, never hold back an admission",
          "[speculative][scheduler]") {
    BlockManager blocks(3, 4);
    Scheduler scheduler(4, 64, blocks);
    Sequence a = scheduled_sequence(1, 2), b = scheduled_sequence(2, 2);
    scheduler.add(&a);
    scheduler.add(&b);
    scheduler.schedule();  // both admitted with one block each
    scheduler.commit();
    a.tokens.push_back(2);
    b.tokens.push_back(2);
    CHECK(blocks.free() == 1);
    a.lookahead = 8;
    b.lookahead = 8;
    auto plan = scheduler.schedule();
    REQUIRE(plan.size() == 2);
    // a (oldest) gets the one free block: positions 3..7 (5 drafts of 8); b only the rest of its block.
    CHECK(plan[0].sequence == &a);
    CHECK(plan[0].draft == 5);
    CHECK(plan[1].sequence == &b);
    CHECK(plan[1].draft == 1);
    CHECK(blocks.free() == 0);
    CHECK(scheduler.preemptions() == 0);
    CHECK(scheduler.running() == 2);
    scheduler.commit();
    // All of a's drafts rejected: the block they took goes back.
    a.tokens.push_back(2);
    blocks.shrink(a.blocks, int(a.tokens.size()));  // 4 tokens: one block
    CHECK(a.blocks.size() == 1);
    CHECK(blocks.free() == 1);
    b.tokens.push_back(2);
    b.computed += 1;  // b's draft was accepted
    b.tokens.push_back(2);
    blocks.shrink(b.blocks, int(b.tokens.size()));  // 5 tokens: b needs its second block next step
    CHECK(b.blocks.size() == 1);

    // b's next position needs a new block: it takes the free one before anyone's drafts, a's
    // drafts get only the room left in a's block (none), and a waiting prompt waits for room as it
    // would without drafts. Nobody is preempted.
    Sequence c = scheduled_sequence(3, 2);
    scheduler.add(&c);
    plan = scheduler.schedule();
    REQUIRE(plan.size() == 2);
    CHECK(plan[0].sequence == &a);
    CHECK(plan[0].draft == 0);
    CHECK(plan[1].sequence == &b);
    CHECK(plan[1].draft == 3);  // positions 5..7, in the block b needed anyway
    CHECK(b.blocks.size() == 2);
    CHECK(scheduler.waiting() == 1);
    CHECK(scheduler.preemptions() == 0);
    scheduler.remove(&a);
    scheduler.remove(&b);
    scheduler.remove(&c);
    CHECK(blocks.free() == 3);

    // Admissions come before drafts: with one block free, a waiting prompt gets it, not a draft.
    BlockManager two(2, 4);
    Scheduler s2(4, 64, two);
    Sequence d = scheduled_sequence(4, 2), e = scheduled_sequence(5, 2);
    s2.add(&d);
    s2.schedule();
    s2.commit();
    d.tokens.push_back(2);
    d.lookahead = 8;
    s2.add(&e);
    plan = s2.schedule();
    REQUIRE(plan.size() == 2);
    CHECK(plan[0].sequence == &d);
    CHECK(plan[0].draft == 1);  // position 3: the rest of d's own block
    CHECK(plan[1].sequence == &e);
    CHECK(d.blocks.size() == 1);
    CHECK(e.blocks.size() == 1);
    CHECK(s2.running() == 2);
    CHECK(s2.preemptions() == 0);
}

TEST_CASE("speculative scheduler: BlockManager::shrink returns exactly the blocks past what the tokens need",
          "[speculative][scheduler]") {
    BlockManager blocks(8, 4);
    std::vector<int32_t> t;
    REQUIRE(blocks.grow(t, 21));  // 6 blocks
    CHECK(t.size() == 6);
    const std::vector<int32_t> before = t;
    blocks.shrink(t, 22);  // already fits: nothing changes
    CHECK(t == before);
    blocks.shrink(t, 9);   // 3 blocks kept, the last 3 returned
    CHECK(t == std::vector<int32_t>(before.begin(), before.begin() + 3));
    CHECK(blocks.free() == 5);
    blocks.shrink(t, 8);  // 2 blocks
    CHECK(t.size() == 2);
    CHECK(blocks.free() == 6);
    // The most recently returned block is reused first: the one shrink just gave back.
    std::vector<int32_t> u;
    REQUIRE(blocks.grow(u, 1));
    CHECK(u[0] == before[2]);
    blocks.shrink(t, 0);
    CHECK(t.empty());
    CHECK(blocks.free() == 7);
}

TEST_CASE("speculative: blocks reserved for drafts a step did not use are not kept: prompt lookup that finds nothing "
          "causes no preemption",
          "[speculative][kv]") {
    // Two identical greedy sequences (n = 2) of a 2-token prompt, ended by a stop string after a
    // few tokens; 4 blocks of 4 positions hold both to the end, and without a draft nobody is
    // preempted. With --draft-ngram 64 (a 64-token match cannot exist in these short sequences)
    // the scheduler reserves draft positions each step and prompt lookup proposes nothing: those
    // blocks must go back as a rejected draft's do, or the second sequence, needing its next block,
    // finds none free and is preempted by speculation that never happened.
    EngineOptions o = engine_options();
    o.max_seqs = 2;
    o.block_size = 4;
    o.kv_blocks = 4;
    Engine base(model("plain"), o);
    const std::vector<int32_t> prompt = {base.config().bos_token_id >= 0 ? base.config().bos_token_id : 1, 72};
    const Choice full = run_requests(base, {{"full", prompt, greedy(12), 1}})[0][0];
    // A stop string that first appears in token 5 or 6: the sequences end at 6 or 7 positions.
    std::string stop;
    for (size_t j : {4u, 5u}) {
        const std::string before = text_of_tokens(base.tokenizer(), full.tokens, j);
        const std::string through = text_of_tokens(base.tokenizer(), full.tokens, j + 1);
        if (through.size() <= before.size() || through.compare(0, before.size(), before) != 0) continue;
        const std::string piece = through.substr(before.size());
        if (before.find(piece) == std::string::npos) {
            stop = piece;
            break;
        }
    }
    REQUIRE_FALSE(stop.empty());
    Request r{"n = 2, stop", prompt, greedy(40, false), 2};
    r.params.stop = {stop};
    const Outcome expected = run_requests(base, {r});
    REQUIRE(expected[0][0].finish_reason == "stop");
    REQUIRE(expected[0][0].completion_tokens <= 6);
    check_idle(base);
    REQUIRE(base.metrics().preemptions.load() == 0);

    o.draft = draft_ngram(64, 8);
    Engine engine(model("plain"), o);
    check_same(expected, run_requests(engine, {r}), {r});
    check_idle(engine);
    CHECK(engine.metrics().draft_proposed.load() == 0);
    CHECK(engine.metrics().preemptions.load() == 0);
}

}  // namespace anvil::test::speculative
