// Shared by the engine tests: test models made on the fly, forward passes over whole sequences,
// and the NumPy reference run as a child process.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/config.hpp"
#include "engine/make_model.hpp"
#include "engine/model_runner.hpp"
#include "engine/runner.hpp"
#include "engine/scheduler.hpp"
#include "engine/weights.hpp"

namespace anvil::test::engine {

struct LoadedModel {
    anvil::engine::ModelConfig config;
    std::unique_ptr<anvil::engine::ModelWeights> weights;
};

inline LoadedModel load_model(const std::filesystem::path& dir, anvil::engine::WeightFormat format,
                              anvil::engine::WeightHome home = anvil::engine::WeightHome::Cpu) {
    LoadedModel m;
    m.config = anvil::engine::load_config(dir);
    m.weights = std::make_unique<anvil::engine::ModelWeights>(m.config, dir, format, home);
    return m;
}

// A sequence for the scheduler alone: `prompt` tokens, nothing computed yet.
inline anvil::engine::Sequence scheduled_sequence(uint64_t id, int prompt) {
    anvil::engine::Sequence s;
    s.id = id;
    s.tokens.assign(size_t(prompt), 1);
    s.prompt_tokens = prompt;
    return s;
}

// A deterministic token sequence of `length` ids below `vocab`, different per `salt`.
inline std::vector<int32_t> token_sequence(int length, int vocab, int salt) {
    std::vector<int32_t> tokens;
    uint32_t state = 2654435761u * uint32_t(salt + 1);
    for (int i = 0; i < length; ++i) {
        state = state * 1664525u + 1013904223u;
        tokens.push_back(int32_t((state >> 8) % uint32_t(vocab)));
    }
    return tokens;
}

// The devices the engine's tests run on: the CPU, and cuda:0 where this build has the GPU runner's
// plugin and the machine a GPU.
inline std::vector<std::string> test_devices() {
    std::vector<std::string> devices = {"cpu"};
    std::string reason;
    if (anvil::engine::cuda_devices(reason) > 0) devices.push_back("cuda:0");
    return devices;
}

// The reference tests' three prompts of 9, 23 (or, `long_one`, 80: past a 64-token sliding window)
// and 3 tokens.
inline std::vector<std::vector<int32_t>> reference_prompts(int vocab, bool long_one) {
    return {token_sequence(9, vocab, 1), token_sequence(long_one ? 80 : 23, vocab, 2), token_sequence(3, vocab, 3)};
}

// The weights and caches that round (each checked against an unrounded f32 run).
struct RoundedVariant {
    anvil::engine::WeightFormat format;
    kernels::KvType kv;
    const char* name;
};
inline std::vector<RoundedVariant> rounded_variants() {
    using anvil::engine::WeightFormat;
    return {{WeightFormat::BF16, kernels::KvType::F32, "bf16 weights"},
            {WeightFormat::Q8, kernels::KvType::F32, "q8 weights"},
            {WeightFormat::F32, kernels::KvType::BF16, "bf16 KV cache"},
            {WeightFormat::Q8, kernels::KvType::BF16, "q8 weights, bf16 KV cache"}};
}

// Logits of every position of every sequence, [sequence][position * vocab + v]. `step` tokens of
// each sequence go into one forward() together with the others' (step 0: the whole prompt), on
// `device` (runner.hpp; the weights loaded for it).
inline std::vector<std::vector<float>> run_sequences(const LoadedModel& m, const std::vector<std::vector<int32_t>>& seqs,
                                                     int step, kernels::KvType kv_type = kernels::KvType::F32,
                                                     const std::string& device = "cpu") {
    using anvil::engine::Batch;
    constexpr int kBlock = 16;
    int total = 0, longest = 0;
    for (const auto& s : seqs) total += int(s.size()), longest = std::max(longest, int(s.size()));
    anvil::engine::RunnerOptions options;
    options.max_batch_tokens = total;
    options.max_logit_rows = total;
    options.max_context = longest;
    options.block_size = kBlock;
    options.kv_type = kv_type;
    // Blocks handed out back to front and interleaved between sequences, so that a sequence's
    // positions are not contiguous in the cache.
    std::vector<std::vector<int32_t>> tables(seqs.size());
    int blocks = 0;
    for (const auto& s : seqs) blocks += (int(s.size()) + kBlock - 1) / kBlock;
    options.kv_blocks = blocks;
    int next = blocks - 1;
    for (int b = 0; b < (longest + kBlock - 1) / kBlock; ++b)
        for (size_t i = 0; i < seqs.size(); ++i)
            if (b * kBlock < int(seqs[i].size())) tables[i].push_back(next--);
    const auto made = anvil::engine::make_runner(device, m.config, *m.weights, options);
    anvil::engine::Runner& runner = *made;

    const int vocab = m.config.vocab_size;
    std::vector<std::vector<float>> out(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) out[i].resize(seqs[i].size() * size_t(vocab));
    const int chunk = step == 0 ? longest : step;
    for (int start = 0; start < longest; start += chunk) {
        Batch batch;
        std::vector<std::pair<size_t, int>> owners;  // (sequence, position) of each logits row
        for (size_t i = 0; i < seqs.size(); ++i) {
            batch.block_tables.push_back(tables[i].data());
            for (int p = start; p < std::min<int>(start + chunk, int(seqs[i].size())); ++p) {
                batch.logit_tokens.push_back(batch.size());
                batch.tokens.push_back(seqs[i][size_t(p)]);
                batch.positions.push_back(p);
                batch.sequence.push_back(int32_t(i));
                owners.emplace_back(i, p);
            }
        }
        runner.forward(batch);
        for (size_t r = 0; r < owners.size(); ++r)
            std::copy(runner.logits(int(r)), runner.logits(int(r)) + vocab,
                      out[owners[r].first].begin() + size_t(owners[r].second) * vocab);
    }
    return out;
}

}  // namespace anvil::test::engine
