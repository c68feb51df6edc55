// Structured output's cost per token against the decode step it rides on, both measured in this
// run: the engine serves the bench model a json_schema request (its metrics split the forward
// passes from the masks), and the vocabulary trie alone is timed on larger synthetic
// vocabularies (32k and 128k tokens, shaped like a real BPE's: words with and without a leading
// space, digits, punctuation runs, indentation, non-ASCII) over the states of random answers.
// Target: a mask under 10% of a decode step of the bench model.
//
// usage: bench_structured [--threads N] [--keep DIR]
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "engine/engine.hpp"
#include "engine/json_grammar.hpp"
#include "engine/make_model.hpp"
#include "engine/token_mask.hpp"
#include "bench_support.hpp"
#include "kernels/cpu_features.hpp"
#include "test_support.hpp"

using namespace anvil::engine;
using Clock = std::chrono::steady_clock;
using ojson = nlohmann::ordered_json;

namespace {

const char* kSchema = R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
    "email": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
    "address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
                "required": ["street", "city"]}, "active": {"type": "boolean"}},
    "required": ["name", "age", "email", "address", "active"]})";

// A byte-level BPE tokenizer.json with the 256 byte tokens and `size` more made-up ones.
Tokenizer synthetic_tokenizer(int size, uint32_t seed) {
    std::mt19937 rng(seed);
    const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
    const std::vector<std::string> punctuation = {"\"", "\",", "\":", "{\"", "\"}", "},", "],", "[\"", "\n", "\n\n", "  ",
                                                  "    ", ".", ",", "(", ")", ";", "\\n", "\\\"", "'s", "://", "=\""};
    const std::vector<std::string> foreign = {"\xC3\xA9", "\xC3\xBC", "\xE4\xB8\xAD", "\xE6\x96\x87", "\xD0\xB4",
                                              "\xD0\xB0", "\xF0\x9F\x98\x80", "\xE3\x81\xAE"};
    std::set<std::string> tokens;
    while (int(tokens.size()) < size) {
        std::string t;
        const unsigned kind = rng() % 100;
        if (kind < 72) {  // a word piece, often after a space
            if (rng() % 2) t = " ";
            const int n = 2 + int(rng() % 9);
            for (int i = 0; i < n; ++i) t += letters[std::min<size_t>(rng() % 26, rng() % 26)];
            if (rng() % 8 == 0) t[t[0] == ' ' ? 1 : 0] = char(std::toupper(t[t[0] == ' ' ? 1 : 0]));
        } else if (kind < 80) {  // digits
            const int n = 1 + int(rng() % 3);
            for (int i = 0; i < n; ++i) t += char('0' + rng() % 10);
        } else if (kind < 90) {  // punctuation around a short piece
            t = punctuation[rng() % punctuation.size()];
            if (rng() % 2) t += letters.substr(rng() % 20, 1 + rng() % 4);
            if (rng() % 3 == 0) t += punctuation[rng() % punctuation.size()];
        } else {  // non-ASCII text
            const int n = 1 + int(rng() % 3);
            for (int i = 0; i < n; ++i) t += foreign[rng() % foreign.size()];
        }
        tokens.insert(t);
    }
    nlohmann::json vocab = nlohmann::json::object();
    int id = 0;
    const auto mapped = [](const std::string& bytes) {
        std::string out;
        for (unsigned char b : bytes) {
            const uint32_t cp = byte_to_unicode(b);
            if (cp < 0x80) out += char(cp);
            else if (cp < 0x800) out += char(0xC0 | (cp >> 6)), out += char(0x80 | (cp & 0x3F));
            else out += char(0xE0 | (cp >> 12)), out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
        }
        return out;
    };
    for (int b = 0; b < 256; ++b) vocab[mapped(std::string(1, char(b)))] = id++;
    for (const auto& t : tokens)
        if (!vocab.contains(mapped(t))) vocab[mapped(t)] = id++;
    const nlohmann::json doc = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
                                {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}}};
    return Tokenizer(doc, nlohmann::json::object(), "synthetic-" + std::to_string(size));
}

struct MaskCost {
    double mean_us, worst_us;
    int tokens;
    double allowed_share;  // of the vocabulary, on average
};

// The trie's mask plus its application to a row of logits, per token of random answers: each
// token drawn among those allowed, those with a quote favoured so that strings end.
MaskCost mask_cost(const Tokenizer& tokenizer, int answers) {
    const int vocab = tokenizer.vocab_size();
    VocabularyTrie trie(tokenizer);
    const auto g = JsonGrammar::from_schema(ojson::parse(kSchema), "schema");
    std::vector<float> logits(size_t(vocab), 0.5f);
    std::vector<float> row(logits.size());
    TokenMask mask;
    std::mt19937 rng(11);
    double total = 0, worst = 0, share = 0;
    int tokens = 0;
    for (int a = 0; a < answers; ++a) {
        JsonMatcher m(g);
        for (int step = 0; step < 400 && !m.done(); ++step) {
            const auto start = Clock::now();
            trie.allowed(m, vocab, mask);
            std::copy(logits.begin(), logits.end(), row.begin());
            for (int i = 0; i < vocab; ++i)
                if (!mask.test(i)) row[size_t(i)] = -1e30f;
            const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
            total += us, worst = std::max(worst, us), ++tokens;
            std::vector<int32_t> allowed, closing;
            for (int32_t t = 0; t < vocab; ++t)
                if (mask.test(t)) {
                    allowed.push_back(t);
                    if (tokenizer.token_bytes(t).find_first_of("\"}]") != std::string::npos) closing.push_back(t);
                }
            share += double(allowed.size()) / vocab;
            if (allowed.empty()) break;
            const auto& pool = !closing.empty() && rng() % 3 == 0 ? closing : allowed;
            m.feed(tokenizer.token_bytes(pool[rng() % pool.size()]));
        }
    }
    return {total / tokens, worst, tokens, share / tokens};
}

}  // namespace

int main(int argc, char** argv) {
    int threads = omp_get_max_threads();
    std::string keep;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--keep")) keep = argv[i + 1];
    }
    spdlog::set_level(spdlog::level::warn);
    anvil::test::TempDir scratch;
    const std::filesystem::path model = keep.empty() ? scratch / "bench" : std::filesystem::path(keep);
    if (!std::filesystem::exists(model / "config.json")) make_model({model, "bench", "llama", "f32", 1, 1});
    std::printf("bench_structured: %s kernels, %d threads, load average %s\n",
                anvil::kernels::isa_name(anvil::kernels::active_isa()).c_str(), threads, anvil::bench::load_average().c_str());

    // The baseline: the bench model's decode steps, in the engine, with the masks beside them.
    EngineOptions options;
    options.max_context = 1024;
    options.max_seqs = 1;
    options.threads = threads;
    options.weights = WeightFormat::Q8;
    Engine engine(model, options);
    SamplingParams params;
    params.temperature = 1.0f;
    params.max_tokens = 256;
    params.grammar = JsonGrammar::from_schema(ojson::parse(kSchema), "schema");
    const Tokenizer& tokenizer = engine.tokenizer();
    for (int32_t t = 0; t < tokenizer.vocab_size(); ++t)
        if (!tokenizer.is_special(t) && tokenizer.token_bytes(t).find('"') != std::string::npos) params.logit_bias.push_back({t, 4.0f});
    const std::vector<int32_t> prompt = tokenizer.encode("Describe a person as JSON:", true);
    for (int seed = 1; seed <= 4; ++seed) {
        params.seed = uint64_t(seed) | (uint64_t(1) << 63);
        auto stream = engine.submit(prompt, params);
        while (auto e = stream->pop(std::chrono::seconds(60)))
            if (e->done) break;
    }
    const Metrics& mx = engine.metrics();
    const double step_us = double(mx.forward_microseconds.load()) / double(mx.engine_steps.load());
    const double engine_mask_us = double(mx.constraint_microseconds.load()) / double(mx.constrained_tokens.load());
    std::printf("baseline  bench model decode step (q8, in the engine)  %9.1f us   (%llu steps)\n", step_us,
                static_cast<unsigned long long>(mx.engine_steps.load()));
    std::printf("mask      bench model vocabulary (%d tokens)         %9.1f us   ratio %.4f of a step (target < 0.10)\n",
                tokenizer.vocab_size(), engine_mask_us, engine_mask_us / step_us);
    for (int size : {32000, 128000}) {
        const Tokenizer big = synthetic_tokenizer(size, 5);
        const MaskCost c = mask_cost(big, 6);
        std::printf("mask      synthetic vocabulary of %6d tokens       %9.1f us   ratio %.4f of a bench step; worst %.0f us, "
                    "%d tokens, %.0f%% of the vocabulary allowed on average\n",
                    big.vocab_size(), c.mean_us, c.mean_us / step_us, c.worst_us, c.tokens, 100 * c.allowed_share);
    }
    std::printf("load average at the end %s\n", anvil::bench::load_average().c_str());
    return 0;
}
