// Speculative decoding in anvil-engine, on real test models (make_model) and the real Engine, and
// the real anvil-engine binary where it is about the command line and HTTP:
//  - lossless: greedy output (tokens, text, finish reasons, usage, logprobs) with every draft kind
//    and K in {1, 4, 16} is the output without a draft, in a mixed continuous batch;
//  - nothing past a stop: stop strings, EOS, max_tokens and the context end the output where they
//    end it without a draft, also inside a run of accepted draft tokens;
//  - the KV cache: draft blocks come only from free blocks, never preempt, go back when rejected;
//  - sampling: the output's distribution with a draft is the target's (a two-sample chi-square
//    test over thousands of seeded requests, shown able to fail against the draft's own);
//  - serve: conflicting or impossible draft flags are refused with one clear line; /v1/models and
//    /metrics report the draft.
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
// 1. Lossless greedy decoding, every draft kind, K in {1, 4, 16}.

TEST_CASE("speculative: greedy output with --draft-self q8 and bf16 is the output without a draft", "[speculative]") {
    const Baseline b = baseline(model("plain"));
    for (WeightFormat w : {WeightFormat::Q8, WeightFormat::BF16})
        for (int k : {1, 4, 16}) {
            const auto [proposed, accepted] = check_lossless(model("plain"), b, draft_self(w, k));
            // The target's own weights, rounded: most drafts are right, and some are not.
            CHECK(accepted * 2 > proposed);
        }
}

TEST_CASE("speculative: a self draft in the target's own format is the target's tensors, held once, and lossless",
          "[speculative]") {
    EngineOptions same = engine_options(draft_self(WeightFormat::Q8, 4));
    same.weights = WeightFormat::Q8;
    Engine engine(model("plain"), same);
    CHECK(engine.draft_weight_bytes() == 0);
    const Baseline b = baseline(model("plain"), WeightFormat::Q8);  // the same target without the draft
    check_same(b.outcome, run_requests(engine, b.requests, 3), b.requests);
    check_idle(engine);
    // The target's own distribution: nearly every draft is accepted. Not all: a request's
    // constraints and penalties shape the target's choice, not the draft's (one of 206 in CI).
    const uint64_t proposed = engine.metrics().draft_proposed.load(), accepted = engine.metrics().draft_accepted.load();
    CHECK(proposed > 0);
    CHECK(accepted * 20 >= proposed * 19);

    EngineOptions other = engine_options(draft_self(WeightFormat::BF16, 4));
    other.weights = WeightFormat::Q8;
    const Engine converted(model("plain"), other);
    CHECK(converted.draft_weight_bytes() > 0);
}

TEST_CASE("speculative: greedy output with --draft-model (another model, the same tokenizer) is the output without a draft",
          "[speculative]") {
    // make-model's tokenizer depends only on the preset and the architecture: another seed has it.
    CHECK(anvil::test::read_file(model("plain") / "tokenizer.json") == anvil::test::read_file(model("other-seed") / "tokenizer.json"));
    CHECK_NOTHROW(require_same_tokenizer(model("plain"), model("other-seed")));
    const Baseline b = baseline(model("plain"));
    for (int k : {1, 4, 16}) {
        // Other random weights: their drafts are (nearly) always rejected.
        check_lossless(model("plain"), b, draft_model(model("other-seed"), k));
        // The target's own first layer as a separate model with its own cache: some drafts are
        // accepted, so the draft's cache is rolled back to the accepted prefix and caught up.
        const auto [proposed, accepted] = check_lossless(model("plain"), b, draft_model(first_layer_of_plain(), k));
        CHECK(accepted > 0);
        CHECK(accepted < proposed);
    }
    // The draft in another weight format.
    DraftOptions q8 = draft_model(first_layer_of_plain(), 4);
    q8.weights = WeightFormat::Q8;
    check_lossless(model("plain"), b, q8);

    // The first layer as a model of its own proposes what --draft-layers 1 proposes from the
    // target's cache: one request alone (the same steps) has the same drafts accepted.
    const Request alone{"alone", Engine(model("plain"), engine_options()).tokenizer().encode("Hello there", true), greedy(40), 1};
    std::vector<std::pair<uint64_t, uint64_t>> counters;
    for (const DraftOptions& d : {draft_layers(1, 4), draft_model(first_layer_of_plain(), 4)}) {
        Engine engine(model("plain"), engine_options(d));
        run_requests(engine, {alone});
        settle(engine);
        counters.emplace_back(engine.metrics().draft_proposed.load(), engine.metrics().draft_accepted.load());
    }
    CHECK(counters[0] == counters[1]);
    CHECK(counters[0].second > 0);
}

TEST_CASE("speculative: greedy output with --draft-layers is the output without a draft, high and low acceptance",
          "[speculative]") {
    SECTION("a model made for early exit (make-model --early-exit 1): most drafts accepted") {
        const Baseline b = baseline(model("early"));
        for (int k : {1, 4, 16}) {
            const auto [proposed, accepted] = check_lossless(model("early"), b, draft_layers(1, k));
            CHECK(accepted * 10 > proposed * 8);
        }
    }
    SECTION("a plain model: the first layer alone predicts few tokens") {
        const Baseline b = baseline(model("plain"));
        for (int k : {1, 4, 16}) {
            const auto [proposed, accepted] = check_lossless(model("plain"), b, draft_layers(1, k));
            CHECK(accepted * 2 < proposed);
        }
    }
}

TEST_CASE("speculative: greedy output with --draft-ngram (prompt lookup) is the output without a draft", "[speculative]") {
    const Baseline b = baseline(model("plain"));
    for (int k : {1, 4, 16}) {
        const auto [proposed, accepted] = check_lossless(model("plain"), b, draft_ngram(2, k));
        CHECK(accepted > 0);
    }
    const auto [proposed, accepted] = check_lossless(model("plain"), b, draft_ngram(1, 4));
    CHECK(accepted > 0);
}

TEST_CASE("speculative: a deeper model (small, 4 layers) with --draft-layers 2 and --draft-self q8 stays lossless",
          "[speculative]") {
    const Baseline b = baseline(model("small-early"));
    const auto [proposed, accepted] = check_lossless(model("small-early"), b, draft_layers(2, 4));
    CHECK(accepted * 2 > proposed);
    check_lossless(model("small-early"), b, draft_self(WeightFormat::Q8, 8));
}

TEST_CASE("speculative: under KV-cache pressure (preemption and recomputation) every draft kind stays lossless",
          "[speculative]") {
    // 40 blocks of 4 positions for 6 sequences: sequences are preempted and recomputed, and a
    // draft model's own cache starts over with them.
    const auto tight = [](DraftOptions d) {
        EngineOptions o = engine_options(d);
        o.kv_blocks = 40;
        return o;
    };
    Baseline b;
    {
        Engine target(model("plain"), tight({}));
        b.requests = mixed_requests(target);
        b.outcome = run_requests(target, b.requests, 3);
        check_idle(target);
        CHECK(target.metrics().preemptions.load() > 0);
    }
    for (const DraftOptions& d : {draft_self(WeightFormat::Q8, 4), draft_model(first_layer_of_plain(), 4),
                                  draft_model(model("other-seed"), 16), draft_layers(1, 4), draft_ngram(2, 4)}) {
        INFO("draft " << d.describe().dump());
        Engine engine(model("plain"), tight(d));
        check_same(b.outcome, run_requests(engine, b.requests, 3), b.requests);
        check_idle(engine);
        CHECK(engine.metrics().draft_proposed.load() > 0);
    }
}

// =============================================================================================
// 4. Nothing past a stop.

TEST_CASE("speculative: stop strings, EOS, max_tokens and the context end the output exactly where they do without a draft, "
          "also inside a run of accepted drafts",
          "[speculative]") {
    Engine base(model("early"), engine_options());
    const Tokenizer& tok = base.tokenizer();
    const std::vector<int32_t> prompt = tok.encode("The quick brown fox jumps over", true);
    const Choice full = run_requests(base, {{"full", prompt, greedy(48), 1}})[0][0];
    REQUIRE(full.tokens.size() == 48);

    std::vector<Request> requests;
    // A stop string starting at every few bytes of the text: most fall inside accepted runs.
    std::vector<std::string> stops;
    for (size_t at = 1; at + 3 < full.text.size(); at += 2) {
        const std::string stop = stop_from(full.text, at, 2 + at % 3);
        if (stop.empty() || std::find(stops.begin(), stops.end(), stop) != stops.end()) continue;
        stops.push_back(stop);
        Request r{"stop '" + stop + "'", prompt, greedy(48, false), 1};
        r.params.stop = {stop};
        requests.push_back(r);
    }
    REQUIRE(stops.size() >= 10);
    // Every max_tokens from 1 to 20: with 16 drafts a step, most ends fall mid-draft.
    for (int m = 1; m <= 20; ++m) requests.push_back({"max_tokens " + std::to_string(m), prompt, greedy(m), 1});
    // EOS at several places: biases that make it the greedy choice at different steps.
    const int32_t eos = base.config().eos_token_ids.front();
    std::vector<int> eos_at;
    for (const auto& [at, bias] : eos_biases(base, prompt, 48)) {
        Request r{"EOS after " + std::to_string(at), prompt, greedy(48, false), 1};
        r.params.logit_bias = {{eos, bias}};
        requests.push_back(r);
        eos_at.push_back(at);
    }
    CAPTURE(eos_at);
    CHECK(eos_at.size() >= 2);
    // The context (128) ends prompts of 127 - j tokens after j + 1 tokens.
    for (int j : {0, 1, 2, 4, 8, 16}) {
        std::vector<int32_t> p;
        while (int(p.size()) < 127 - j) p.insert(p.end(), prompt.begin(), prompt.end());
        p.resize(size_t(127 - j));
        requests.push_back({"context, prompt " + std::to_string(p.size()), p, greedy(64), 1});
    }
    const Outcome expected = run_requests(base, requests);

    // Independently of the engine without a draft: a stop string ends the text before its first
    // occurrence, max_tokens after that many of the full output's tokens.
    for (size_t r = 0; r < requests.size(); ++r) {
        const Choice& c = expected[r][0];
        INFO(requests[r].label << ": " << describe(c));
        if (!requests[r].params.stop.empty()) {
            CHECK(c.finish_reason == "stop");
            CHECK(c.text == full.text.substr(0, full.text.find(requests[r].params.stop[0])));
        }
        if (requests[r].params.logit_bias.empty() && requests[r].prompt == prompt) {
            REQUIRE(c.tokens.size() <= full.tokens.size());
            CHECK(std::equal(c.tokens.begin(), c.tokens.end(), full.tokens.begin()));
        }
        if (requests[r].label.starts_with("max_tokens ")) {
            CHECK(c.finish_reason == "length");
            CHECK(c.completion_tokens == std::stoi(requests[r].label.substr(11)));
        }
        if (requests[r].label.starts_with("EOS after ")) {
            CHECK(c.finish_reason == "stop");
            CHECK(c.completion_tokens == std::stoi(requests[r].label.substr(10)));
            CHECK(c.tokens.back() == eos);
            CHECK(std::equal(c.tokens.begin(), c.tokens.end() - 1, full.tokens.begin()));
        }
        if (requests[r].label.starts_with("context")) {
            CHECK(c.finish_reason == "length");
            CHECK(c.completion_tokens == 128 - int(requests[r].prompt.size()));
        }
    }

    for (const DraftOptions& d : {draft_layers(1, 16), draft_layers(1, 4), draft_self(WeightFormat::Q8, 16)}) {
        INFO("draft " << d.describe().dump());
        Engine engine(model("early"), engine_options(d));
        // The full output alone: long runs of accepted drafts (few verifications for 47 tokens).
        CHECK(run_requests(engine, {{"full", prompt, greedy(48), 1}})[0][0].tokens == full.tokens);
        settle(engine);
        const uint64_t verifications = engine.metrics().draft_verifications.load();
        CAPTURE(verifications, engine.metrics().draft_accepted.load());
        if (d.tokens == 16) CHECK(verifications * 4 <= 47);
        check_same(expected, run_requests(engine, requests), requests);
        check_idle(engine);
    }
}

}  // namespace anvil::test::speculative
