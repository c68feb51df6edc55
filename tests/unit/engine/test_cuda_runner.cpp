// The GPU runner (engine/cuda_model_runner.hpp) against the CPU runner on generated models (the
// NumPy reference test, test_engine_forward.cpp, runs on cuda:0 too): bf16 and q8 weights
// and a bf16 cache keeping the CPU's top token wherever it leads by 0.02, an early exit, a GGUF
// file's adjacent-pair rope, decode graphs replayed for new positions, the cache sized from the
// memory fraction less a companion's share, rows read for their argmax alone, a second runner on
// the first's weights, a self draft within the fraction, and a whole engine on the GPU decoding
// what the CPU engine decodes. Tagged [cuda]: without a device each case warns why
// and passes (tests/device/run.sh runs them where there is one).
#ifdef ANVIL_HAVE_CUDA_KERNELS

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cmath>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "engine/sampler.hpp"
#include "kernels/cuda/device.hpp"
#include "test_engine_helpers.hpp"
#include "test_engine_reference.hpp"
#include "test_support.hpp"

using namespace anvil;
using anvil::engine::WeightFormat;
using anvil::engine::WeightHome;
using anvil::test::TempDir;
using anvil::test::engine::Agreement;
using anvil::test::engine::load_model;
using anvil::test::engine::reference_prompts;
using anvil::test::engine::run_sequences;
using anvil::test::engine::token_sequence;
using anvil::test::engine::top1_agreement;
using anvil::test::engine::worst_relative_error;

namespace {

const std::string kDevice = "cuda:0";

bool gpu_present_or_skip() {
    std::string reason;
    const int count = engine::cuda_devices(reason);
    if (count == 0) WARN(reason << "; skipped");
    return count > 0;
}

// A batch of one sequence's first `n` tokens with every row's logits wanted.
engine::Batch prompt_batch(const std::vector<int32_t>& tokens, int n, const std::vector<int32_t>& table) {
    engine::Batch batch;
    batch.block_tables.push_back(table.data());
    for (int p = 0; p < n; ++p) {
        batch.tokens.push_back(tokens[size_t(p)]);
        batch.positions.push_back(p);
        batch.sequence.push_back(0);
        batch.logit_tokens.push_back(p);
    }
    return batch;
}

engine::RunnerOptions small_options() {
    engine::RunnerOptions options;
    options.max_batch_tokens = 8;
    options.max_logit_rows = 8;
    options.max_context = 32;
    options.kv_blocks = 2;
    return options;
}

}  // namespace

TEST_CASE("cuda runner: bf16 and q8 weights and a bf16 KV cache keep the CPU runner's top token where it leads by 0.02",
          "[cuda][engine]") {
    if (!gpu_present_or_skip()) return;
    TempDir dir;
    engine::make_model({dir / "m", "tiny", "llama", "f32", 11, 1});
    const auto config = engine::load_config(dir / "m");
    const auto seqs = reference_prompts(config.vocab_size, true);
    for (const auto& v : anvil::test::engine::rounded_variants()) {
        INFO(v.name);
        const auto cpu_model = load_model(dir / "m", v.format);
        const auto gpu_model = load_model(dir / "m", v.format, WeightHome::Device);
        const auto cpu = run_sequences(cpu_model, seqs, 0, v.kv);
        for (int step : {0, 1}) {
            INFO("step " << step);
            const auto gpu = run_sequences(gpu_model, seqs, step, v.kv, kDevice);
            Agreement a;
            for (size_t i = 0; i < seqs.size(); ++i) top1_agreement(gpu[i], cpu[i], config.vocab_size, 0.02f, a);
            INFO("top token agrees at " << a.agree << " of " << a.clear << " clear positions, of " << a.positions);
            CHECK(a.agree == a.clear);
            CHECK(a.clear >= a.positions * 8 / 10);
        }
    }
}

TEST_CASE("cuda runner: a GGUF file's adjacent-pair rope and an early exit give the CPU runner's logits", "[cuda][engine]") {
    if (!gpu_present_or_skip()) return;
    TempDir dir;
    engine::make_model({dir / "m.gguf", "tiny", "llama", "f32", 5, 1});
    auto gpu_model = load_model(dir / "m.gguf", WeightFormat::Stored, WeightHome::Device);
    auto cpu_model = load_model(dir / "m.gguf", WeightFormat::Stored);
    REQUIRE(gpu_model.config.rope_pairs);
    const int vocab = gpu_model.config.vocab_size;
    const auto seqs = reference_prompts(vocab, false);
    const auto cpu = run_sequences(cpu_model, seqs, 0);
    const auto gpu = run_sequences(gpu_model, seqs, 1, kernels::KvType::F32, kDevice);
    for (size_t i = 0; i < seqs.size(); ++i) CHECK(worst_relative_error(gpu[i], cpu[i], vocab) < 1e-4);

    // The first layer alone, then the final norm and head: what --draft-layers 1 proposes from.
    const std::vector<int32_t> table = {1, 0};
    const engine::Batch batch = prompt_batch(seqs[0], 5, table);
    auto cpu_runner = engine::make_runner("cpu", cpu_model.config, *cpu_model.weights, small_options());
    auto gpu_runner = engine::make_runner(kDevice, gpu_model.config, *gpu_model.weights, small_options());
    cpu_runner->forward(batch, 1);
    gpu_runner->forward(batch, 1);
    for (int r = 0; r < 5; ++r) {
        const std::vector<float> c(cpu_runner->logits(r), cpu_runner->logits(r) + vocab);
        const std::vector<float> g(gpu_runner->logits(r), gpu_runner->logits(r) + vocab);
        CHECK(worst_relative_error(g, c, vocab) < 1e-4);
    }
}

TEST_CASE("cuda runner: the KV cache is sized from the memory fraction, less a companion's share, and one the fraction "
          "cannot hold is refused",
          "[cuda][engine]") {
    if (!gpu_present_or_skip()) return;
    TempDir dir;
    engine::make_model({dir / "m", "tiny", "llama", "f32", 3, 1});
    auto model = load_model(dir / "m", WeightFormat::Stored, WeightHome::Device);
    engine::RunnerOptions options;
    options.max_context = 256;
    options.kv_blocks = 0;
    options.memory_fraction = 0.5;
    const size_t per_block = engine::device_block_bytes(model.config, options);
    const auto memory = kernels::cuda::device_memory(0);
    size_t alone = 0;
    {
        const auto runner = engine::make_runner(kDevice, model.config, *model.weights, options);
        INFO("blocks " << runner->options().kv_blocks << ", total " << memory.total);
        CHECK(runner->kv_bytes() == size_t(runner->options().kv_blocks) * per_block);
        // Half the device, less what was in use before and the headroom: more than a third of it.
        CHECK(runner->kv_bytes() > memory.total / 3);
        CHECK(runner->kv_bytes() < memory.total / 2);
        alone = runner->kv_bytes();
    }
    {
        // A draft's weights (1 GiB here) and a cache of as many blocks: its cache and the
        // companion's take what its cache alone took.
        engine::RunnerOptions shared = options;
        shared.companion_bytes = size_t(1) << 30;
        shared.companion_block_bytes = per_block;
        const auto runner = engine::make_runner(kDevice, model.config, *model.weights, shared);
        const double both = 2.0 * double(runner->kv_bytes()) + double(shared.companion_bytes);
        INFO("alone " << alone << ", with the companion " << runner->kv_bytes());
        CHECK(both <= double(alone) + 2.0 * double(per_block));
        CHECK(both >= double(alone) - double(size_t(64) << 20));
    }

    options.memory_fraction = 0.0001;
    try {
        (void)engine::make_runner(kDevice, model.config, *model.weights, options);
        FAIL("a cache below one context was accepted");
    } catch (const std::runtime_error& e) {
        CHECK_THAT(e.what(), Catch::Contains("raise --gpu-memory-utilization or lower --max-context"));
    }
}

TEST_CASE("cuda runner: rows marked largest_only come back as their first largest alone, the others whole", "[cuda][engine]") {
    if (!gpu_present_or_skip()) return;
    TempDir dir;
    engine::make_model({dir / "m", "tiny", "llama", "f32", 13, 1});
    auto cpu_model = load_model(dir / "m", WeightFormat::Stored);
    auto gpu_model = load_model(dir / "m", WeightFormat::Stored, WeightHome::Device);
    const int vocab = gpu_model.config.vocab_size;
    const auto seqs = reference_prompts(vocab, false);
    const std::vector<int32_t> table = {1, 0};
    auto cpu = engine::make_runner("cpu", cpu_model.config, *cpu_model.weights, small_options());
    auto gpu = engine::make_runner(kDevice, gpu_model.config, *gpu_model.weights, small_options());

    engine::Batch whole = prompt_batch(seqs[0], 5, table);
    gpu->forward(whole);
    std::vector<std::vector<float>> before;
    for (int r = 0; r < 5; ++r) before.emplace_back(gpu->logits(r), gpu->logits(r) + vocab);

    engine::Batch marked = prompt_batch(seqs[1], 5, table);
    marked.largest_only = {1, 0, 1, 1, 0};
    cpu->forward(marked);
    gpu->forward(marked);
    for (int r = 0; r < 5; ++r) {
        INFO("row " << r);
        const std::vector<float> c(cpu->logits(r), cpu->logits(r) + vocab);
        std::vector<float> sorted = c;
        std::nth_element(sorted.begin(), sorted.begin() + 1, sorted.end(), std::greater<float>());
        // The same token wherever the CPU's leads clearly (f32 weights: within 1e-4 of each other).
        if (sorted[0] - sorted[1] >= 0.02f) CHECK(gpu->argmax(r) == cpu->argmax(r));
        CHECK(cpu->argmax(r) == engine::argmax_token(c.data(), vocab));
        const std::vector<float> g(gpu->logits(r), gpu->logits(r) + vocab);
        if (marked.largest_only[size_t(r)]) CHECK(g == before[size_t(r)]);  // not copied back: the last step's row
        else CHECK(worst_relative_error(g, c, vocab) < 1e-4);
    }
}

TEST_CASE("cuda runner: a runner made from the same weights reads the other's copy, and device bytes are runner.hpp's model",
          "[cuda][engine]") {
    if (!gpu_present_or_skip()) return;
    TempDir dir;
    engine::make_model({dir / "m", "tiny", "llama", "f32", 17, 1});
    auto model = load_model(dir / "m", WeightFormat::BF16, WeightHome::Device);
    auto other = load_model(dir / "m", WeightFormat::BF16, WeightHome::Device);
    const engine::RunnerOptions options = small_options();
    auto first = engine::make_runner(kDevice, model.config, *model.weights, options);
    auto second = engine::make_runner(kDevice, model.config, *model.weights, options, first.get());
    const size_t weights = engine::device_weight_bytes(model.config, *model.weights);
    const size_t working = engine::device_working_bytes(model.config, options);
    CHECK(first->device_bytes() == weights + working + first->kv_bytes());
    CHECK(second->device_bytes() == working + second->kv_bytes());
    CHECK(first->kv_bytes() == size_t(options.kv_blocks) * engine::device_block_bytes(model.config, options));

    const auto seqs = reference_prompts(model.config.vocab_size, false);
    const std::vector<int32_t> table = {0, 1};
    const engine::Batch batch = prompt_batch(seqs[0], 6, table);
    first->forward(batch);
    second.reset();  // the weights outlive the runner that did not upload them, and the other way round
    second = engine::make_runner(kDevice, model.config, *model.weights, options, first.get());
    first.reset();
    auto fresh = engine::make_runner(kDevice, model.config, *model.weights, options);
    second->forward(batch);
    fresh->forward(batch);
    for (int r = 0; r < 6; ++r) {
        const int vocab = model.config.vocab_size;
        const std::vector<float> a(second->logits(r), second->logits(r) + vocab), b(fresh->logits(r), fresh->logits(r) + vocab);
        CHECK(worst_relative_error(a, b, vocab) < 1e-6);
    }
    // Weights the other runner was not made from are not its copy.
    CHECK_THROWS_AS(engine::make_runner(kDevice, other.config, *other.weights, options, fresh.get()), std::logic_error);
}

TEST_CASE("cuda engine: a self draft in the target's format runs on the target's copy of the weights and is lossless",
          "[cuda][engine]") {
    if (!gpu_present_or_skip()) return;
    TempDir dir;
    engine::make_model({dir / "m", "small", "llama", "f32", 23, 1});
    engine::EngineOptions options;
    options.max_seqs = 2;
    options.max_context = 256;
    options.device = kDevice;
    options.weights = WeightFormat::BF16;
    options.gpu_memory_utilization = 0.5;
    size_t plain_blocks = 0;
    {
        engine::Engine plain(dir / "m", options);
        plain_blocks = size_t(plain.metrics().kv_blocks_total.load());
    }
    options.draft.kind = engine::DraftKind::Self;
    options.draft.weights = WeightFormat::BF16;
    options.draft.tokens = 4;
    engine::Engine drafted(dir / "m", options);
    CHECK(drafted.draft_weight_bytes() == 0);
    // Target and draft stay within the fraction: the draft's cache (as many blocks again) and its
    // working memory come out of what the target's cache alone took.
    engine::RunnerOptions shape;
    shape.block_size = options.block_size;
    const size_t per_block = engine::device_block_bytes(drafted.config(), shape);
    const double kept = double(plain_blocks) * double(per_block) - 2.0 * double(drafted.metrics().kv_blocks_total.load()) * double(per_block);
    shape.max_batch_tokens = options.max_batch_tokens;
    shape.max_logit_rows = options.max_seqs;
    shape.max_context = options.max_context;
    const double draft_working = double(engine::device_working_bytes(drafted.config(), shape));
    INFO("blocks alone " << plain_blocks << ", with the draft " << drafted.metrics().kv_blocks_total.load());
    CHECK(std::fabs(kept - draft_working) < double(size_t(64) << 20));
    const auto memory = kernels::cuda::device_memory(0);
    CHECK(double(drafted.device_bytes()) <= 0.5 * double(memory.total) + double(size_t(64) << 20));

    const int vocab = drafted.config().vocab_size;
    engine::SamplingParams params;
    params.temperature = 0.0f;
    params.max_tokens = 40;
    params.ignore_eos = true;
    auto stream = drafted.submit(token_sequence(9, vocab, 3), params);
    int tokens = 0;
    for (bool done = false; !done;) {
        auto event = stream->pop(std::chrono::milliseconds(120000));
        REQUIRE(event);
        REQUIRE(event->error.empty());
        tokens += int(event->tokens.size());
        done = event->done;
    }
    CHECK(tokens == 40);
    // The draft is the target itself: every proposal is what the target picks.
    const uint64_t proposed = drafted.metrics().draft_proposed.load(), accepted = drafted.metrics().draft_accepted.load();
    CHECK(proposed > 0);
    CHECK(accepted == proposed);
}

TEST_CASE("cuda engine: greedy decoding on the GPU gives the CPU engine's tokens up to a near tie", "[cuda][engine]") {
    if (!gpu_present_or_skip()) return;
    TempDir dir;
    engine::make_model({dir / "m", "small", "llama", "f32", 9, 1});
    const auto generate = [&](const std::string& device) {
        engine::EngineOptions options;
        options.max_seqs = 3;
        options.max_context = 256;
        options.device = device;
        engine::Engine e(dir / "m", options);
        std::vector<std::shared_ptr<engine::RequestStream>> streams;
        const int vocab = e.config().vocab_size;
        for (int r = 0; r < 3; ++r) {
            engine::SamplingParams params;
            params.temperature = 0.0f;
            params.max_tokens = 40;
            params.ignore_eos = true;
            params.logprobs = 2;
            streams.push_back(e.submit(token_sequence(7 + 11 * r, vocab, r), params));
        }
        std::vector<std::vector<engine::GeneratedToken>> out(3);
        for (int r = 0; r < 3; ++r)
            for (bool done = false; !done;) {
                auto event = streams[size_t(r)]->pop(std::chrono::milliseconds(120000));
                REQUIRE(event);
                REQUIRE(event->error.empty());
                out[size_t(r)].insert(out[size_t(r)].end(), event->tokens.begin(), event->tokens.end());
                done = event->done;
            }
        return out;
    };
    const auto cpu = generate("cpu");
    const auto gpu = generate(kDevice);
    for (size_t r = 0; r < cpu.size(); ++r) {
        REQUIRE(gpu[r].size() == cpu[r].size());
        for (size_t i = 0; i < cpu[r].size(); ++i) {
            if (gpu[r][i].token == cpu[r][i].token) continue;
            // Tokens may part only where the CPU's two best were within 0.02 of each other.
            REQUIRE(cpu[r][i].top.size() >= 2);
            INFO("request " << r << " parts at token " << i);
            CHECK(std::fabs(cpu[r][i].top[0].logprob - cpu[r][i].top[1].logprob) < 0.02f);
            break;
        }
    }
}

#endif  // ANVIL_HAVE_CUDA_KERNELS
