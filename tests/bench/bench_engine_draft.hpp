// bench_engine --draft: speculative decoding on the bench model trained for early exit
// (make-model --preset bench --early-exit 2), each draft kind against the same engine without a
// draft in the same run. For each kind it prints the decode rates at batch 1 and 4 with and
// without the draft, the measured acceptance, and the speed-up a perfect implementation would reach
// from that acceptance and the measured costs of one draft step and one verification (forward
// passes timed alone on the runner); the ratio of the two is the implementation's efficiency.
// The engine without a draft is measured beside each kind, trial for trial, best of each.
#pragma once

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "engine/make_model.hpp"
#include "engine/model_runner.hpp"

namespace anvil::bench::draft {

using namespace anvil::engine;
using Clock = std::chrono::steady_clock;

inline double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct Kind {
    std::string name;  // as given to --draft: self-q8, self-bf16, model, layers, ngram
    DraftOptions options;
};

// The bench model's depth at which its early exit is trained, and the draft model (its first
// layers as a model of their own) for --draft-model.
constexpr int kExitLayers = 2;

inline std::vector<Kind> parse_kinds(const std::string& list, const std::filesystem::path& draft_model, int tokens) {
    std::vector<Kind> out;
    std::stringstream in(list);
    std::string name;
    while (std::getline(in, name, ',')) {
        DraftOptions d;
        d.tokens = tokens;
        if (name == "self-q8") d.kind = DraftKind::Self, d.weights = WeightFormat::Q8;
        else if (name == "self-bf16") d.kind = DraftKind::Self, d.weights = WeightFormat::BF16;
        else if (name == "model") d.kind = DraftKind::Model, d.model_dir = draft_model, d.weights = WeightFormat::F32;
        else if (name == "layers") d.kind = DraftKind::Layers, d.layers = kExitLayers;
        else if (name == "ngram") d.kind = DraftKind::Ngram, d.ngram = 2;
        else throw std::runtime_error("--draft " + name + ": expected self-q8, self-bf16, model, layers or ngram");
        out.push_back({name, d});
    }
    return out;
}

struct Counters {
    uint64_t proposed = 0, accepted = 0, verifications = 0, generated = 0;
};
inline Counters counters(Engine& e) {
    Metrics& m = e.metrics();
    return {m.draft_proposed.load(), m.draft_accepted.load(), m.draft_verifications.load(), m.generation_tokens.load()};
}
inline Counters operator-(const Counters& a, const Counters& b) {
    return {a.proposed - b.proposed, a.accepted - b.accepted, a.verifications - b.verifications, a.generated - b.generated};
}

inline std::vector<int32_t> prompt_tokens(int salt, int vocab) {
    std::vector<int32_t> p;
    for (int i = 0; i < 16; ++i) p.push_back(int32_t((i * 37 + salt * 101 + 5) % std::min(vocab, 300)));
    return p;
}

// Aggregate decode rate of `streams` concurrent greedy sequences of `tokens` tokens: tokens after
// each stream's first over the span from the earliest first token to the latest last one. Best of
// `trials` (on a shared machine the least disturbed run is the truest).
inline double decode_rate(Engine& engine, int streams, int tokens, int trials) {
    double best = 0;
    for (int trial = 0; trial < trials; ++trial) {
        SamplingParams params;
        params.temperature = 0;
        params.max_tokens = tokens;
        params.ignore_eos = true;
        std::vector<std::shared_ptr<RequestStream>> running;
        for (int s = 0; s < streams; ++s)
            running.push_back(engine.submit(prompt_tokens(s, engine.config().vocab_size), params));
        std::vector<std::future<std::pair<Clock::time_point, Clock::time_point>>> spans;
        for (auto& stream : running)
            spans.push_back(std::async(std::launch::async, [stream] {
                Clock::time_point first{}, last{};
                for (;;) {
                    auto event = stream->pop(std::chrono::milliseconds(600000));
                    if (!event) throw std::runtime_error("bench stream timed out");
                    if (!event->error.empty()) throw std::runtime_error(event->error);
                    if (!event->tokens.empty()) {
                        last = Clock::now();
                        if (first == Clock::time_point{}) first = last;
                    }
                    if (event->done) return std::pair{first, last};
                }
            }));
        Clock::time_point first = Clock::time_point::max(), last{};
        for (auto& s : spans) {
            const auto [f, l] = s.get();
            first = std::min(first, f);
            last = std::max(last, l);
        }
        best = std::max(best, double(streams) * (tokens - 1) / std::chrono::duration<double>(last - first).count());
    }
    return best;
}

// One forward pass of `n` tokens of one sequence at positions from `at`, timed alone: the best of
// several, after a warm-up.
inline double forward_seconds(ModelRunner& runner, int n, int at, int exit_after) {
    const int blocks = runner.options().kv_blocks;
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    for (int b = 0; b < blocks; ++b) table[size_t(b)] = b;
    Batch batch;
    batch.block_tables = {table.data()};
    for (int i = 0; i < n; ++i) {
        batch.tokens.push_back((i * 37 + 11) % 300);
        batch.positions.push_back(at + i);
        batch.sequence.push_back(0);
        batch.logit_tokens.push_back(i);
    }
    runner.forward(batch, exit_after);
    double best = 1e30;
    for (int trial = 0; trial < 7; ++trial) {
        const auto start = Clock::now();
        runner.forward(batch, exit_after);
        best = std::min(best, since(start));
    }
    return best;
}

inline RunnerOptions runner_options(int max_tokens, int context) {
    RunnerOptions o;
    o.max_batch_tokens = max_tokens;
    o.max_logit_rows = max_tokens;
    o.max_context = context;
    o.block_size = 16;
    o.kv_blocks = (context + 15) / 16;
    return o;
}

inline int run(const std::filesystem::path& work, const std::string& kinds_list, int tokens, int k) {
    const std::filesystem::path model = work / "bench-early-exit", draft_model = work / "bench-early-exit-draft";
    if (!std::filesystem::exists(model / "config.json")) {
        MakeModelOptions m{model, "bench", "llama", "f32", 1, 1};
        m.early_exit = kExitLayers;
        make_model(m);
    }
    if (!std::filesystem::exists(draft_model / "config.json")) {
        MakeModelOptions m{draft_model, "bench", "llama", "f32", 1, 1};
        m.layers = kExitLayers;
        make_model(m);
    }
    const std::vector<Kind> kinds = parse_kinds(kinds_list, draft_model, k);
    const ModelConfig config = load_config(model);
    std::printf("draft bench: the bench model trained for early exit (%d layers, the last %d only correcting), f32 "
                "weights, %d tokens a stream, K = %d\n",
                config.n_layers, config.n_layers - kExitLayers, tokens, k);

    EngineOptions base;
    base.max_seqs = 4;
    base.max_context = 256;
    base.max_batch_tokens = 256;
    base.weights = WeightFormat::F32;
    // The baseline engine stays up and is measured again beside each draft, trial for trial, so
    // that a busy moment on a shared machine slows both: every ratio uses the best of each.
    Engine baseline(model, base);
    double rate1 = decode_rate(baseline, 1, tokens, 3), rate4 = decode_rate(baseline, 4, tokens, 2);
    std::printf("baseline  no draft      batch 1 %7.2f tok/s   batch 4 %7.2f tok/s\n", rate1, rate4);

    // Isolated costs at the middle of a stream's positions.
    const int at = 16 + tokens / 2;
    ModelWeights target(config, model, WeightFormat::F32);
    ModelRunner runner(config, target, runner_options(k + 1, 16 + tokens + k + 2));
    const double t1 = forward_seconds(runner, 1, at, 0);
    std::vector<double> verify(size_t(k) + 1);
    for (int n = 1; n <= k; ++n) verify[size_t(n)] = forward_seconds(runner, n + 1, at, 0);
    std::printf("costs     target step %.3f ms; verification of K+1 = %d tokens %.3f ms (%.2f steps)\n", t1 * 1e3, k + 1,
                verify[size_t(k)] * 1e3, verify[size_t(k)] / t1);

    bool any_fast = false, all_efficient = true;
    for (const Kind& kind : kinds) {
        // The draft step's cost, alone.
        double td = 0;
        if (kind.options.kind == DraftKind::Layers) {
            td = forward_seconds(runner, 1, at, kind.options.layers);
        } else if (kind.options.kind == DraftKind::Self || kind.options.kind == DraftKind::Model) {
            const bool own = kind.options.kind == DraftKind::Model;
            const ModelConfig draft_config = own ? load_config(draft_model) : config;
            ModelWeights weights(draft_config, own ? draft_model : model, kind.options.weights);
            ModelRunner draft_runner(draft_config, weights, runner_options(k + 1, 16 + tokens + k + 2));
            td = forward_seconds(draft_runner, 1, at, 0);
        }
        EngineOptions o = base;
        o.draft = kind.options;
        Engine engine(model, o);
        const Counters before = counters(engine);
        const uint64_t f0 = engine.metrics().forward_microseconds, d0 = engine.metrics().draft_microseconds, s0 = engine.metrics().engine_steps;
        double r1 = 0, r4 = 0;
        for (int trial = 0; trial < 5; ++trial) {
            rate1 = std::max(rate1, decode_rate(baseline, 1, tokens, 1));
            r1 = std::max(r1, decode_rate(engine, 1, tokens, 1));
        }
        const Counters c = counters(engine) - before;
        // What the steps cost inside the engine, beside the costs measured alone: where a low
        // efficiency comes from (a disturbed run shows here too).
        const double forward_ms = double(engine.metrics().forward_microseconds - f0) / 1e3 / double(engine.metrics().engine_steps - s0);
        const double draft_ms = c.proposed ? double(engine.metrics().draft_microseconds - d0) / 1e3 / double(c.proposed) : 0.0;
        for (int trial = 0; trial < 2; ++trial) {
            rate4 = std::max(rate4, decode_rate(baseline, 4, tokens, 1));
            r4 = std::max(r4, decode_rate(engine, 4, tokens, 1));
        }
        const double acceptance = c.proposed ? double(c.accepted) / double(c.proposed) : 0.0;
        // The perfect implementation: every verification costs one forward of its tokens plus its
        // draft steps, every other token one target step, and nothing else costs anything.
        const double per_verification = c.verifications ? double(c.proposed) / double(c.verifications) : 0.0;
        const int kv = std::clamp(int(per_verification + 0.5), 1, k);
        const double produced = double(c.verifications) + double(c.accepted);
        const double plain = std::max(0.0, double(c.generated) - produced);
        const double ideal_time = double(c.verifications) * (verify[size_t(kv)] + per_verification * td) + plain * t1;
        const double ideal = ideal_time > 0 ? double(c.generated) * t1 / ideal_time : 1.0;
        const double speedup = r1 / rate1, efficiency = speedup / ideal;
        any_fast = any_fast || speedup >= 1.5;
        all_efficient = all_efficient && efficiency >= 0.85;
        std::printf("draft     %-9s batch 1 %7.2f tok/s (%.2fx)  batch 4 %7.2f tok/s (%.2fx)  acceptance %.3f, %.2f tokens "
                    "a verification; draft step %.3f ms; ideal %.2fx, efficiency %.2f\n",
                    kind.name.c_str(), r1, speedup, r4, r4 / rate4, acceptance, c.verifications ? produced / double(c.verifications) : 0.0,
                    td * 1e3, ideal, efficiency);
        std::printf("          in the engine: %.3f ms a target forward, %.3f ms a draft token; %llu verifications for %llu tokens\n",
                    forward_ms, draft_ms, static_cast<unsigned long long>(c.verifications),
                    static_cast<unsigned long long>(c.generated));
    }
    std::printf("targets   some kind >= 1.5x at batch 1: %s; every kind >= 0.85 of its ideal: %s\n", any_fast ? "yes" : "NO",
                all_efficient ? "yes" : "NO");
    return 0;
}

}  // namespace anvil::bench::draft
