// What the speculative decoding tests share (tests/unit/engine/test_engine_speculative*.cpp): the
// test models, requests run through a real Engine, their outcomes compared choice by choice, the
// draft kinds' options, and the baseline a draft must reproduce exactly.
#pragma once

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
#include "test_engine_helpers.hpp"
#include "test_engine_served.hpp"
#include "test_support.hpp"

namespace anvil::test::speculative {

using namespace anvil::engine;
using anvil::test::TempDir;
using anvil::test::engine::scheduled_sequence;
using anvil::test::engine::sse_events;
using nlohmann::json;
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Test models, made once per process (each ctest process makes the ones its test uses).

inline fs::path model(const std::string& name) {
    static TempDir dir;
    static std::mutex mutex;
    std::lock_guard<std::mutex> lock(mutex);
    const fs::path out = dir / name;
    if (fs::exists(out / "config.json")) return out;
    MakeModelOptions o;
    o.out = out;
    o.preset = "tiny";
    o.arch = "llama";
    o.dtype = "f32";
    o.seed = 3;
    if (name == "plain") {
    } else if (name == "early") {
        o.early_exit = 1;  // layer 1 only corrects layer 0: --draft-layers 1 predicts most tokens
    } else if (name == "other-seed") {
        o.seed = 11;  // the same tokenizer (preset and arch), other weights: a --draft-model
    } else if (name == "small") {
        o.preset = "small";  // 400 merges, not tiny's 64: another tokenizer
    } else if (name == "small-early") {
        o.preset = "small";
        o.early_exit = 2;
    } else {
        FAIL("no test model " << name);
    }
    make_model(o);
    return out;
}

// The plain tiny model's first layer alone (make-model --layers 1: every tensor comes from a
// stream named after it, so it is exactly the first layer of "plain" with its final norm and
// head): as a target it samples what --draft-layers 1 proposes on "plain"; as a --draft-model it
// proposes the same tokens from a cache of its own.
inline fs::path first_layer_of_plain() {
    static const fs::path out = [] {
        const fs::path plain = model("plain");
        MakeModelOptions o;
        o.out = plain.parent_path() / "plain-1";
        o.preset = "tiny";
        o.arch = "llama";
        o.dtype = "f32";
        o.seed = 3;
        o.layers = 1;
        make_model(o);
        return o.out;
    }();
    return out;
}

// ---------------------------------------------------------------------------------------------
// Running requests on an Engine and collecting what its streams say, per choice.

struct Choice {
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;
    std::vector<std::vector<std::pair<int32_t, float>>> top;
    std::string text, finish_reason, error;
    int prompt_tokens = -1, completion_tokens = -1;
    bool done = false;
};

inline std::string describe(const Choice& c) {
    std::ostringstream out;
    out << "finish " << c.finish_reason << ", usage " << c.prompt_tokens << "+" << c.completion_tokens << ", text '"
        << c.text << "', tokens";
    for (int32_t t : c.tokens) out << " " << t;
    if (!c.error.empty()) out << ", error " << c.error;
    return out.str();
}

struct Request {
    std::string label;
    std::vector<int32_t> prompt;
    SamplingParams params;
    int n = 1;
};

using Outcome = std::vector<std::vector<Choice>>;  // [request][choice]

inline void absorb(std::vector<Choice>& choices, const StreamEvent& e) {
    REQUIRE(e.index >= 0);
    REQUIRE(e.index < int(choices.size()));
    Choice& c = choices[size_t(e.index)];
    REQUIRE_FALSE(c.done);
    c.text += e.text;
    for (const GeneratedToken& t : e.tokens) {
        c.tokens.push_back(t.token);
        c.logprobs.push_back(t.logprob);
        std::vector<std::pair<int32_t, float>> top;
        for (const TokenLogprob& alt : t.top) top.emplace_back(alt.token, alt.logprob);
        c.top.push_back(std::move(top));
    }
    if (e.done) {
        c.done = true;
        c.finish_reason = e.finish_reason;
        c.error = e.error;
        c.prompt_tokens = e.prompt_tokens;
        c.completion_tokens = e.completion_tokens;
    }
}

inline bool all_done(const std::vector<Choice>& choices) {
    return std::all_of(choices.begin(), choices.end(), [](const Choice& c) { return c.done; });
}

// Submits the first `first_wave` requests, waits until the first of them has produced a token (so
// that the rest arrive while it decodes: their prompts are prefilled beside its draft tokens),
// submits the others, and collects every choice.
inline Outcome run_requests(Engine& engine, const std::vector<Request>& requests, size_t first_wave = 0) {
    if (first_wave == 0 || first_wave > requests.size()) first_wave = requests.size();
    Outcome out(requests.size());
    std::vector<std::shared_ptr<RequestStream>> streams(requests.size());
    const auto submit = [&](size_t r) {
        out[r].assign(size_t(requests[r].n), Choice{});
        streams[r] = engine.submit(requests[r].prompt, requests[r].params, requests[r].n);
    };
    const auto pop = [&](size_t r) {
        auto event = streams[r]->pop(std::chrono::milliseconds(120000));
        INFO("request " << requests[r].label);
        REQUIRE(event);
        absorb(out[r], *event);
    };
    for (size_t r = 0; r < first_wave; ++r) submit(r);
    if (first_wave < requests.size()) {
        while (out[0][0].tokens.empty() && !all_done(out[0])) pop(0);
        for (size_t r = first_wave; r < requests.size(); ++r) submit(r);
    }
    for (size_t r = 0; r < requests.size(); ++r)
        while (!all_done(out[r])) pop(r);
    return out;
}

// Compares two outcomes choice by choice: every field must be equal (logprobs exactly: the target
// computes them from the same logits with or without a draft).
inline void check_same(const Outcome& expected, const Outcome& actual, const std::vector<Request>& requests) {
    REQUIRE(expected.size() == actual.size());
    for (size_t r = 0; r < expected.size(); ++r) {
        REQUIRE(expected[r].size() == actual[r].size());
        for (size_t i = 0; i < expected[r].size(); ++i) {
            const Choice &e = expected[r][i], &a = actual[r][i];
            INFO("request " << requests[r].label << ", choice " << i << "\n  without a draft: " << describe(e)
                            << "\n  with the draft:   " << describe(a));
            CHECK(a.error.empty());
            CHECK(a.tokens == e.tokens);
            CHECK(a.text == e.text);
            CHECK(a.finish_reason == e.finish_reason);
            CHECK(a.prompt_tokens == e.prompt_tokens);
            CHECK(a.completion_tokens == e.completion_tokens);
            CHECK(a.logprobs == e.logprobs);
            CHECK(a.top == e.top);
        }
    }
}

inline EngineOptions engine_options(DraftOptions draft = {}) {
    EngineOptions o;
    o.max_seqs = 6;
    o.max_context = 128;
    o.max_batch_tokens = 32;  // prompts are prefilled in chunks beside other sequences' drafts
    o.block_size = 4;         // drafts cross block boundaries often
    o.threads = 1;            // the CI machine has two cores shared by parallel tests
    o.seed = 5;
    o.draft = draft;
    return o;
}

inline DraftOptions draft_self(WeightFormat w, int k) {
    DraftOptions d;
    d.kind = DraftKind::Self;
    d.weights = w;
    d.tokens = k;
    return d;
}
inline DraftOptions draft_model(const fs::path& dir, int k) {
    DraftOptions d;
    d.kind = DraftKind::Model;
    d.model_dir = dir;
    d.tokens = k;
    return d;
}
inline DraftOptions draft_layers(int layers, int k) {
    DraftOptions d;
    d.kind = DraftKind::Layers;
    d.layers = layers;
    d.tokens = k;
    return d;
}
inline DraftOptions draft_ngram(int n, int k) {
    DraftOptions d;
    d.kind = DraftKind::Ngram;
    d.ngram = n;
    d.tokens = k;
    return d;
}

inline SamplingParams greedy(int max_tokens, bool ignore_eos = true) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = max_tokens;
    p.ignore_eos = ignore_eos;
    return p;
}

inline std::string utf8_boundary_cut(const std::string& text, size_t at) {
    while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
    return text.substr(0, at);
}

// Waits until the engine thread has finished every step before now: a request of one token is
// served by a step of its own after them. Metrics read afterwards are settled.
inline void settle(Engine& engine) {
    SamplingParams p = greedy(1);
    auto stream = engine.submit({1}, p, 1);
    for (;;) {
        auto event = stream->pop(std::chrono::milliseconds(120000));
        REQUIRE(event);
        if (event->done) break;
    }
}

// Every block is back in the pool and no sequence runs or waits.
inline void check_idle(Engine& engine) {
    settle(engine);
    Metrics& m = engine.metrics();
    CHECK(m.kv_blocks_used.load() == 0);
    CHECK(m.running.load() == 0);
    CHECK(m.waiting.load() == 0);
    CHECK(m.draft_accepted.load() <= m.draft_proposed.load());
}

// The first `count` tokens' text as the engine's decoder gives it.
inline std::string text_of_tokens(const Tokenizer& tokenizer, const std::vector<int32_t>& tokens, size_t count) {
    StreamDecoder decoder(tokenizer);
    std::string out;
    for (size_t i = 0; i < count && i < tokens.size(); ++i) out += decoder.push(tokens[i]);
    return out + decoder.finish();
}

// A stop string of about `bytes` bytes (whole characters) that first occurs at or after byte `at`
// of `text` (the first such cut from there on), or "" when there is none.
inline std::string stop_from(const std::string& text, size_t at, size_t bytes) {
    for (; at + bytes <= text.size(); ++at) {
        const std::string head = utf8_boundary_cut(text, at);
        const std::string stop = utf8_boundary_cut(text, head.size() + bytes).substr(head.size());
        // Printable ASCII only: a U+FFFD the decoder writes for a character the output's end cut
        // off is in the final text but never seen by the stop check (with or without a draft).
        const bool plain = std::all_of(stop.begin(), stop.end(), [](char ch) { return ch >= 0x20 && ch < 0x7f; });
        if (!stop.empty() && plain && text.find(stop) == head.size()) return stop;
    }
    return "";
}

// Biases on EOS (the config's first eos id) that end the greedy continuation of `prompt` at
// different steps, as (completion tokens, bias), each at least 5 tokens before max_tokens. Found
// from the gap between the greedy token's logprob and EOS's at each step (a request for every
// token's logprob): a bias between a step's gap and the narrowest gap before it makes EOS the
// greedy choice there and nowhere earlier.
inline std::vector<std::pair<int, float>> eos_biases(Engine& target, const std::vector<int32_t>& prompt, int max_tokens) {
    const int32_t eos = target.config().eos_token_ids.front();
    SamplingParams all = greedy(max_tokens);
    all.logprobs = target.config().vocab_size;
    const Choice c = run_requests(target, {{"gaps", prompt, all, 1}})[0][0];
    std::vector<std::pair<int, float>> out;
    double narrowest = 1e30;
    for (size_t j = 0; j < c.tokens.size(); ++j) {
        double gap = 1e30;
        for (const auto& [token, logprob] : c.top[j])
            if (token == eos) gap = double(c.logprobs[j]) - logprob;
        // EOS must win by a clear margin here, and lose by one at every earlier step.
        if (gap + 0.02 < narrowest) {
            if (j > 0 && gap > 0 && int(j) + 1 <= max_tokens - 5)
                out.emplace_back(int(j) + 1, float((gap + std::min(narrowest, gap + 1.0)) / 2));
            narrowest = gap;
        }
    }
    return out;
}

// The mixed batch the lossless tests run: prompts of 1 to ~100 tokens, max_tokens 1 and 2,
// stop strings, EOS ending some (a moderate logit_bias on it, found on the target without a draft,
// makes it the greedy choice part-way through), ignore_eos on and off, n = 3, logprobs, a prompt
// that runs into the context, a repetitive one (prompt lookup finds matches), logit_bias.
inline std::vector<Request> mixed_requests(Engine& target) {
    const Tokenizer& tok = target.tokenizer();
    const auto encode = [&](const std::string& text) { return tok.encode(text, true); };
    std::vector<Request> r;

    Request fox{"fox, logprobs", encode("The quick brown fox"), greedy(40), 1};
    fox.params.logprobs = 3;
    r.push_back(fox);
    r.push_back({"max_tokens 1", encode("Hello"), greedy(1, false), 1});
    r.push_back({"max_tokens 2", encode("Hello world! Hello there,"), greedy(2, false), 1});

    // A stop string from the middle of the target's own continuation.
    Request probe{"probe", encode("The sea is wide, the sea is deep;"), greedy(40), 1};
    const std::string full = run_requests(target, {probe})[0][0].text;
    REQUIRE(full.size() > 12);
    Request stopped{"stop string", probe.prompt, greedy(40, false), 1};
    stopped.params.stop = {"never appears \x01", stop_from(full, full.size() / 2, 3)};
    REQUIRE_FALSE(stopped.params.stop[1].empty());
    r.push_back(stopped);

    // EOS part-way through: a bias on it that makes it the greedy choice at some later step.
    std::vector<std::pair<int, float>> eos_ends;
    std::vector<int32_t> eos_prompt;
    for (const char* text : {"Hello", "Hello there, how are you today?", "It is sunny and warm", "The server answers", "0 1 2 3 4"}) {
        eos_prompt = encode(text);
        eos_ends = eos_biases(target, eos_prompt, 40);
        if (!eos_ends.empty() && eos_ends.back().first >= 3) break;
    }
    REQUIRE_FALSE(eos_ends.empty());
    Request ends{"EOS", eos_prompt, greedy(40, false), 1};
    ends.params.logit_bias = {{target.config().eos_token_ids.front(), eos_ends.back().second}};
    ends.params.logprobs = 1;
    r.push_back(ends);
    Request past_eos = ends;
    past_eos.label = "EOS ignored";
    past_eos.params.ignore_eos = true;
    past_eos.params.max_tokens = 30;
    r.push_back(past_eos);

    r.push_back({"n = 3", encode("def forward(self, x):"), greedy(17, false), 3});
    r.push_back({"one-token prompt", {target.config().bos_token_id >= 0 ? target.config().bos_token_id : 1}, greedy(20), 1});
    std::string words;
    for (int i = 0; words.size() < 400; ++i) words += " word" + std::to_string(i % 13);
    std::vector<int32_t> long_prompt = encode(words);
    REQUIRE(long_prompt.size() >= 101);
    long_prompt.resize(101);
    r.push_back({"runs into the context", long_prompt, greedy(64), 1});  // 27 tokens, then length
    r.push_back({"repetitive", encode("1 2 3 1 2 3 1 2 3 1 2 3"), greedy(30), 1});
    Request biased{"logit_bias", encode("user: What is two plus two?"), greedy(24), 1};
    biased.params.logit_bias = {{17, 3.0f}, {109, -100.0f}, {315, 2.5f}};
    r.push_back(biased);
    r.push_back({"max_tokens 7", encode("assistant: Two plus two is"), greedy(7), 1});
    return r;
}

struct Baseline {
    std::vector<Request> requests;
    Outcome outcome;
};

// The mixed batch and what the target says to it without a draft.
inline Baseline baseline(const fs::path& target_dir, WeightFormat weights = WeightFormat::Stored) {
    EngineOptions options = engine_options();
    options.weights = weights;
    Engine target(target_dir, options);
    Baseline b;
    b.requests = mixed_requests(target);
    b.outcome = run_requests(target, b.requests, 3);
    // The batch covers what it should: every way of finishing.
    std::map<std::string, int> finishes;
    for (const auto& choices : b.outcome)
        for (const auto& c : choices) finishes[c.finish_reason] += 1;
    CHECK(finishes["stop"] >= 2);
    CHECK(finishes["length"] >= 8);
    check_idle(target);
    return b;
}

// Runs the batch with a draft, compares with the baseline, and checks the cache is empty again.
// Returns {proposed, accepted}.
inline std::pair<uint64_t, uint64_t> check_lossless(const fs::path& target_dir, const Baseline& b, const DraftOptions& draft) {
    INFO("draft " << draft.describe().dump());
    Engine engine(target_dir, engine_options(draft));
    const Outcome got = run_requests(engine, b.requests, 3);
    check_same(b.outcome, got, b.requests);
    check_idle(engine);
    const uint64_t proposed = engine.metrics().draft_proposed.load(), accepted = engine.metrics().draft_accepted.load();
    CHECK(proposed > 0);
    CHECK(engine.metrics().draft_verifications.load() > 0);
    CHECK(engine.metrics().preemptions.load() == 0);
    return {proposed, accepted};
}

}  // namespace anvil::test::speculative
