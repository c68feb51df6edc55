// "Nothing allocates in the decode loop": the scheduler, batch building and forward pass of a
// decode step, counted through a replaced global operator new.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <new>

#include "engine/block_manager.hpp"
#include "engine/scheduler.hpp"
#include "engine/sampler.hpp"
#include "test_engine_helpers.hpp"
#include "test_support.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define ANVIL_COUNT_ALLOCATIONS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ANVIL_COUNT_ALLOCATIONS 0
#endif
#endif
#ifndef ANVIL_COUNT_ALLOCATIONS
#define ANVIL_COUNT_ALLOCATIONS 1
#endif

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
}  // namespace

#if ANVIL_COUNT_ALLOCATIONS
#if defined(__GNUC__) && !defined(__clang__)
// The replacement operator new below is malloc; its deletes are free.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
// Plain malloc-backed replacements that count while a test asks them to; everything else in the
// test binary behaves as before. Not compiled under AddressSanitizer, which owns operator new.
void* operator new(std::size_t size) {
    if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return ::operator new(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
#endif

using namespace anvil::engine;

TEST_CASE("a decode step schedules, batches and runs the model without allocating", "[engine]") {
#if !ANVIL_COUNT_ALLOCATIONS
    WARN("SKIPPED under AddressSanitizer, which owns operator new; the gcc build runs this test");
    return;
#endif
    anvil::test::TempDir dir;
    make_model({dir / "m", "tiny", "qwen2", "f32", 2, 1});
    auto model = anvil::test::engine::load_model(dir / "m", WeightFormat::Q8);
    constexpr int kSeqs = 3, kContext = 64, kBlock = 16;
    RunnerOptions options;
    options.max_batch_tokens = 32;
    options.max_logit_rows = kSeqs;
    options.max_context = kContext;
    options.block_size = kBlock;
    options.kv_blocks = kSeqs * (kContext / kBlock + 1);
    options.kv_type = anvil::kernels::KvType::BF16;
    ModelRunner runner(model.config, *model.weights, options);
    BlockManager blocks(options.kv_blocks, kBlock);
    Scheduler scheduler(kSeqs, options.max_batch_tokens, blocks);
    std::vector<Sequence> seqs(kSeqs);
    for (int i = 0; i < kSeqs; ++i) {
        seqs[size_t(i)].id = uint64_t(i + 1);
        seqs[size_t(i)].tokens = anvil::test::engine::token_sequence(5 + 3 * i, 300, i);
        seqs[size_t(i)].prompt_tokens = int(seqs[size_t(i)].tokens.size());
        seqs[size_t(i)].tokens.reserve(kContext);
        seqs[size_t(i)].blocks.reserve(kContext / kBlock + 2);
        scheduler.add(&seqs[size_t(i)]);
    }
    Batch batch;
    batch.tokens.reserve(32);
    batch.positions.reserve(32);
    batch.sequence.reserve(32);
    batch.block_tables.reserve(kSeqs);
    batch.logit_tokens.reserve(kSeqs);
    SamplingParams greedy;
    greedy.temperature = 0;
    Rng rng(1);
    SamplerScratch scratch;
    scratch.reserve(model.config.vocab_size);

    auto step = [&] {
        const auto& plan = scheduler.schedule();
        batch.clear();
        for (size_t i = 0; i < plan.size(); ++i) {
            batch.block_tables.push_back(plan[i].sequence->blocks.data());
            for (int p = plan[i].start; p < plan[i].start + plan[i].count; ++p) {
                batch.tokens.push_back(plan[i].sequence->tokens[size_t(p)]);
                batch.positions.push_back(p);
                batch.sequence.push_back(int32_t(i));
            }
            if (plan[i].logits) batch.logit_tokens.push_back(batch.size() - 1);
        }
        runner.forward(batch);
        scheduler.commit();
        int row = 0;
        for (const auto& chunk : plan)
            if (chunk.logits)
                chunk.sequence->tokens.push_back(sample_token(runner.logits(row++), model.config.vocab_size, greedy, rng, scratch));
        return int(plan.size());
    };
    step();  // prefill, and OpenMP starts its threads
    step();
    g_allocations = 0;
    g_counting = true;
    int scheduled = 0;
    for (int i = 0; i < 30; ++i) scheduled += step();
    g_counting = false;
    CHECK(scheduled == 30 * kSeqs);
    CHECK(g_allocations.load() == 0);
    // The counter does count: one vector growing is seen.
    g_counting = true;
    std::vector<int> grows;
    grows.push_back(1);
    g_counting = false;
    CHECK(g_allocations.load() >= 1);
}
