// Prefix caching: the block manager's names, matches, sharing and eviction as bookkeeping; then a
// real engine over HTTP, where prompts that start alike take their leading full blocks from the
// cache (counted in /metrics) and give exactly the tokens they give without it: greedy and
// seeded, with n choices, with a draft that has a cache of its own, and with a cache so small
// that prefixes are evicted and recomputed.
#include <catch2/catch.hpp>

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "engine/block_manager.hpp"
#include "engine/engine.hpp"
#include "engine/make_model.hpp"
#include "engine/server.hpp"
#include "test_engine_helpers.hpp"
#include "test_engine_served.hpp"
#include "test_support.hpp"

using namespace anvil::engine;
using nlohmann::json;

TEST_CASE("prefix cache: full blocks are named, matched by their tokens and the blocks before them, shared and evicted",
          "[engine][prefix_cache]") {
    BlockManager blocks(6, 4, true);
    const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    std::vector<int32_t> ta;
    std::vector<uint64_t> ha;
    REQUIRE(blocks.match(a, 2, ta, ha) == 0);  // nothing cached yet
    REQUIRE(blocks.grow(ta, 11));
    blocks.name_full_blocks(a, 10, ta, ha);  // 10 positions computed: two full blocks named
    CHECK(ha.size() == 2);

    // The same first 8 tokens share both blocks; a different first block shares nothing, even
    // with the same second block's tokens.
    std::vector<int32_t> tb, tc;
    std::vector<uint64_t> hb, hc;
    CHECK(blocks.match({1, 2, 3, 4, 5, 6, 7, 8, 42}, 2, tb, hb) == 2);
    CHECK(tb == std::vector<int32_t>(ta.begin(), ta.begin() + 2));
    CHECK(blocks.match({0, 2, 3, 4, 5, 6, 7, 8, 42}, 2, tc, hc) == 0);
    CHECK(blocks.match({1, 2, 3, 4, 5, 6, 7, 9, 42}, 2, tc, hc) == 1);  // the first block only
    blocks.release(tc);
    CHECK(blocks.used() == 3);  // a's three blocks, two of them held by b too

    blocks.release(ta);
    CHECK(blocks.cached() == 0);  // both named blocks still held by b: only the unnamed third went back
    blocks.release(tb);
    CHECK(blocks.cached() == 2);
    CHECK(blocks.free() == 6);
    // Released, the prefix is still there to match.
    std::vector<int32_t> td;
    std::vector<uint64_t> hd;
    CHECK(blocks.match(a, 2, td, hd) == 2);
    blocks.release(td);

    // Filling the cache evicts the prefixes released longest ago, never-used blocks going first.
    std::vector<int32_t> big;
    REQUIRE(blocks.grow(big, 16));  // 4 never-used blocks
    CHECK(blocks.cached() == 2);
    REQUIRE(blocks.grow(big, 20));  // one more: a cached prefix block gives way
    CHECK(blocks.cached() == 1);
    CHECK_FALSE(blocks.grow(big, 28));  // two more than there are
    blocks.release(big);
    std::vector<int32_t> te;
    std::vector<uint64_t> he;
    CHECK(blocks.match(a, 2, te, he) < 2);
}

namespace {

class PrefixCacheEngine {
public:
    PrefixCacheEngine(bool caching, int kv_blocks = 0, DraftOptions draft = {}) {
        EngineOptions options;
        options.max_context = 512;
        options.prefix_caching = caching;
        options.kv_blocks = kv_blocks;
        options.draft = draft;
        served_ = anvil::test::engine::serve_tiny(dir_ / "model", options);
    }
    json post(const json& body) const {
        auto res = served_->client().Post("/v1/completions", body.dump(), "application/json");
        REQUIRE(res);
        INFO(body.dump() << " -> " << res->body);
        REQUIRE(res->status == 200);
        return json::parse(res->body);
    }
    const Metrics& metrics() { return served_->engine().metrics(); }
    int vocab() { return served_->engine().config().vocab_size; }
    std::string metrics_text() const {
        auto res = served_->client().Get("/metrics");
        REQUIRE(res);
        return res->body;
    }

private:
    anvil::test::TempDir dir_;
    std::unique_ptr<anvil::test::engine::InProcessServer> served_;
};

json texts(const json& reply) {
    json out = json::array();
    for (const auto& c : reply["choices"]) out.push_back({c["text"], c["finish_reason"]});
    return out;
}

json body_for(const std::vector<int32_t>& prompt, int max_tokens, double temperature, int n = 1) {
    return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", temperature}, {"seed", 7}, {"n", n},
            {"ignore_eos", true}};
}

}  // namespace

TEST_CASE("prefix cache: prompts that start alike reuse blocks and give the tokens they give without the cache",
          "[engine][prefix_cache]") {
    PrefixCacheEngine cached(true), uncached(false);
    const int vocab = cached.vocab();
    const std::vector<int32_t> system = anvil::test::engine::token_sequence(100, vocab, 1);
    std::vector<std::vector<int32_t>> prompts;
    for (int salt = 0; salt < 3; ++salt) {
        std::vector<int32_t> p = system;
        for (int32_t t : anvil::test::engine::token_sequence(9, vocab, 50 + salt)) p.push_back(t);
        prompts.push_back(p);
    }
    for (const auto& p : prompts)
        for (double temperature : {0.0, 1.0}) {
            INFO("temperature " << temperature);
            CHECK(texts(cached.post(body_for(p, 12, temperature))) == texts(uncached.post(body_for(p, 12, temperature))));
        }
    // The first prompt computed everything; each later one found the system prompt's 6 full
    // blocks (96 of its 100 tokens) the first prompt left, and the repeat of a prompt 6 too.
    CHECK(cached.metrics().prefix_cache_queries.load() == 6 * 109);
    CHECK(cached.metrics().prefix_cache_hits.load() == 5 * 96);
    CHECK(uncached.metrics().prefix_cache_hits.load() == 0);
    CHECK_THAT(cached.metrics_text(), Catch::Contains("anvil_engine_prefix_cache_hits_total{model=\"tiny\"} 480"));

    // n choices: the later ones wait for the first's prompt and take it from the cache.
    const std::vector<int32_t> fresh = anvil::test::engine::token_sequence(70, vocab, 99);
    const uint64_t before = cached.metrics().prefix_cache_hits.load();
    CHECK(texts(cached.post(body_for(fresh, 10, 1.0, 3))) == texts(uncached.post(body_for(fresh, 10, 1.0, 3))));
    CHECK(cached.metrics().prefix_cache_hits.load() - before == 2 * 64);
}

TEST_CASE("prefix cache: with a draft of its own cache, and with a cache small enough to evict, outputs do not change",
          "[engine][prefix_cache]") {
    DraftOptions draft;
    draft.kind = DraftKind::Self;
    draft.weights = WeightFormat::Q8;
    draft.tokens = 3;
    PrefixCacheEngine speculative(true, 0, draft), plain(false);
    // 20 blocks of 16: room for two sequences of 150 tokens at most, so earlier prefixes give way.
    PrefixCacheEngine small(true, 20);
    const int vocab = plain.vocab();
    for (int round = 0; round < 2; ++round)
        for (int salt = 0; salt < 4; ++salt) {
            const std::vector<int32_t> p = anvil::test::engine::token_sequence(120, vocab, salt);
            INFO("round " << round << " prompt " << salt);
            const json expected = texts(plain.post(body_for(p, 16, 0.0)));
            CHECK(texts(speculative.post(body_for(p, 16, 0.0))) == expected);
            CHECK(texts(small.post(body_for(p, 16, 0.0))) == expected);
        }
    CHECK(speculative.metrics().prefix_cache_hits.load() == 4 * 112);  // the second round's
    CHECK(speculative.metrics().draft_proposed.load() > 0);
    // Four 120-token prompts do not fit 20 blocks together: the second round recomputed some.
    CHECK(small.metrics().prefix_cache_hits.load() < 4 * 112);
}
