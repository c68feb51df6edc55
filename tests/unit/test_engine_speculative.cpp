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
#include "test_engine_helpers.hpp"
#include "test_engine_served.hpp"
#include "test_support.hpp"

using namespace anvil::engine;
using nlohmann::json;
using anvil::test::TempDir;
using anvil::test::engine::scheduled_sequence;
using anvil::test::engine::sse_events;
namespace fs = std::filesystem;

namespace {

// ---------------------------------------------------------------------------------------------
// Test models, made once per process (each ctest process makes the ones its test uses).

fs::path model(const std::string& name) {
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
fs::path first_layer_of_plain() {
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

std::string describe(const Choice& c) {
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

void absorb(std::vector<Choice>& choices, const StreamEvent& e) {
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

bool all_done(const std::vector<Choice>& choices) {
    return std::all_of(choices.begin(), choices.end(), [](const Choice& c) { return c.done; });
}

// Submits the first `first_wave` requests, waits until the first of them has produced a token (so
// that the rest arrive while it decodes: their prompts are prefilled beside its draft tokens),
// submits the others, and collects every choice.
Outcome run_requests(Engine& engine, const std::vector<Request>& requests, size_t first_wave = 0) {
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
void check_same(const Outcome& expected, const Outcome& actual, const std::vector<Request>& requests) {
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

EngineOptions engine_options(DraftOptions draft = {}) {
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

DraftOptions draft_self(WeightFormat w, int k) {
    DraftOptions d;
    d.kind = DraftKind::Self;
    d.weights = w;
    d.tokens = k;
    return d;
}
DraftOptions draft_model(const fs::path& dir, int k) {
    DraftOptions d;
    d.kind = DraftKind::Model;
    d.model_dir = dir;
    d.tokens = k;
    return d;
}
DraftOptions draft_layers(int layers, int k) {
    DraftOptions d;
    d.kind = DraftKind::Layers;
    d.layers = layers;
    d.tokens = k;
    return d;
}
DraftOptions draft_ngram(int n, int k) {
    DraftOptions d;
    d.kind = DraftKind::Ngram;
    d.ngram = n;
    d.tokens = k;
    return d;
}

SamplingParams greedy(int max_tokens, bool ignore_eos = true) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = max_tokens;
    p.ignore_eos = ignore_eos;
    return p;
}

std::string utf8_boundary_cut(const std::string& text, size_t at) {
    while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
    return text.substr(0, at);
}

// Waits until the engine thread has finished every step before now: a request of one token is
// served by a step of its own after them. Metrics read afterwards are settled.
void settle(Engine& engine) {
    SamplingParams p = greedy(1);
    auto stream = engine.submit({1}, p, 1);
    for (;;) {
        auto event = stream->pop(std::chrono::milliseconds(120000));
        REQUIRE(event);
        if (event->done) break;
    }
}

// Every block is back in the pool and no sequence runs or waits.
void check_idle(Engine& engine) {
    settle(engine);
    Metrics& m = engine.metrics();
    CHECK(m.kv_blocks_used.load() == 0);
    CHECK(m.running.load() == 0);
    CHECK(m.waiting.load() == 0);
    CHECK(m.draft_accepted.load() <= m.draft_proposed.load());
}

// The first `count` tokens' text as the engine's decoder gives it.
std::string text_of_tokens(const Tokenizer& tokenizer, const std::vector<int32_t>& tokens, size_t count) {
    StreamDecoder decoder(tokenizer);
    std::string out;
    for (size_t i = 0; i < count && i < tokens.size(); ++i) out += decoder.push(tokens[i]);
    return out + decoder.finish();
}

// A stop string of about `bytes` bytes (whole characters) that first occurs at or after byte `at`
// of `text` (the first such cut from there on), or "" when there is none.
std::string stop_from(const std::string& text, size_t at, size_t bytes) {
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
std::vector<std::pair<int, float>> eos_biases(Engine& target, const std::vector<int32_t>& prompt, int max_tokens) {
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
std::vector<Request> mixed_requests(Engine& target) {
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
Baseline baseline(const fs::path& target_dir, WeightFormat weights = WeightFormat::Stored) {
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
std::pair<uint64_t, uint64_t> check_lossless(const fs::path& target_dir, const Baseline& b, const DraftOptions& draft) {
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

// ---------------------------------------------------------------------------------------------
// Chi-square tests.

// The regularized upper incomplete gamma function Q(a, x) (series below a + 1, continued fraction
// above), for the chi-square distribution's upper tail.
double gamma_q(double a, double x) {
    if (x <= 0) return 1.0;
    const double log_front = -x + a * std::log(x) - std::lgamma(a);
    if (x < a + 1) {
        double term = 1.0 / a, sum = term, ap = a;
        for (int n = 0; n < 10000; ++n) {
            ap += 1;
            term *= x / ap;
            sum += term;
            if (std::abs(term) < std::abs(sum) * 1e-15) break;
        }
        return 1.0 - sum * std::exp(log_front);
    }
    constexpr double tiny = 1e-300;
    double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
    for (int i = 1; i < 10000; ++i) {
        const double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (std::abs(d) < tiny) d = tiny;
        c = b + an / c;
        if (std::abs(c) < tiny) c = tiny;
        d = 1 / d;
        const double delta = d * c;
        h *= delta;
        if (std::abs(delta - 1) < 1e-15) break;
    }
    return std::exp(log_front) * h;
}

double chi2_p_value(double chi2, int df) { return gamma_q(df / 2.0, chi2 / 2.0); }

using Key = std::vector<int32_t>;

struct TwoSample {
    double chi2 = 0;
    int df = 0;
    double p = 1;
    std::string table;
};

// Pearson's two-sample (homogeneity) test of two samples' category counts. Categories with fewer
// than 10 observations in both samples together are pooled (and the pool, when still that small,
// joins the smallest category), so that every expected count is at least about 5.
TwoSample two_sample(const std::map<Key, int>& a, const std::map<Key, int>& b) {
    std::map<Key, std::pair<double, double>> joined;
    double na = 0, nb = 0;
    for (const auto& [k, n] : a) joined[k].first += n, na += n;
    for (const auto& [k, n] : b) joined[k].second += n, nb += n;
    std::vector<std::pair<Key, std::pair<double, double>>> cells;
    std::pair<double, double> pooled{0, 0};
    for (const auto& [k, n] : joined) {
        if (n.first + n.second < 10) {
            pooled.first += n.first;
            pooled.second += n.second;
        } else {
            cells.emplace_back(k, n);
        }
    }
    if (pooled.first + pooled.second >= 10 || cells.empty()) {
        cells.emplace_back(Key{-1}, pooled);
    } else if (pooled.first + pooled.second > 0) {
        auto smallest = std::min_element(cells.begin(), cells.end(), [](const auto& x, const auto& y) {
            return x.second.first + x.second.second < y.second.first + y.second.second;
        });
        smallest->second.first += pooled.first;
        smallest->second.second += pooled.second;
    }
    TwoSample t;
    std::ostringstream table;
    const double ra = std::sqrt(nb / na), rb = std::sqrt(na / nb);
    for (const auto& [k, n] : cells) {
        const double diff = ra * n.first - rb * n.second;
        if (n.first + n.second > 0) t.chi2 += diff * diff / (n.first + n.second);
        table << " [";
        for (size_t i = 0; i < k.size(); ++i) table << (i ? "," : "") << k[i];
        table << "] " << n.first << "/" << n.second;
    }
    t.df = int(cells.size()) - 1;
    t.p = t.df > 0 ? chi2_p_value(t.chi2, t.df) : 1.0;
    t.table = table.str();
    return t;
}

// Generated tokens of `seeds` requests for one prompt, seeded first_seed, first_seed + 1, ...,
// all queued at once.
std::vector<std::vector<int32_t>> sampled_tokens(Engine& engine, const std::vector<int32_t>& prompt,
                                                 const SamplingParams& params, int seeds, int first_seed) {
    std::vector<Request> requests;
    for (int s = first_seed; s < first_seed + seeds; ++s) {
        Request r{"seed " + std::to_string(s), prompt, params, 1};
        r.params.seed = uint64_t(s);
        requests.push_back(std::move(r));
    }
    const Outcome out = run_requests(engine, requests);
    std::vector<std::vector<int32_t>> tokens;
    for (const auto& choices : out) {
        REQUIRE(choices[0].tokens.size() == size_t(params.max_tokens));
        tokens.push_back(choices[0].tokens);
    }
    return tokens;
}

// Counts of the tokens at `positions` (one category per combination).
std::map<Key, int> counts(const std::vector<std::vector<int32_t>>& samples, const std::vector<size_t>& positions) {
    std::map<Key, int> out;
    for (const auto& s : samples) {
        Key k;
        for (size_t p : positions) k.push_back(s[p]);
        out[k] += 1;
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// anvil-engine as a child process.

// `anvil-engine serve` with the flags, its log quiet but for warnings and errors.
std::vector<std::string> serve_argv(const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {"env", "ANVIL_LOG=warn", ANVIL_ENGINE, "serve"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return argv;
}

// The lines of a refused serve's output that are not the listening line printed before loading.
std::vector<std::string> error_lines(const std::string& output) {
    std::vector<std::string> lines;
    std::istringstream in(output);
    std::string line;
    while (std::getline(in, line))
        if (!line.empty() && line.find("listening on http://") == std::string::npos) lines.push_back(line);
    return lines;
}

// `line` contains `message`, where each '*' in the message stands for a number.
bool matches(const std::string& line, const std::string& message) {
    for (size_t from = 0; from < line.size(); ++from) {
        size_t at = from, i = 0;
        for (; i < message.size() && at <= line.size(); ++i) {
            if (message[i] == '*') {
                const size_t start = at;
                while (at < line.size() && std::isdigit(static_cast<unsigned char>(line[at]))) ++at;
                if (at == start) break;
            } else if (at < line.size() && line[at] == message[i]) {
                ++at;
            } else {
                break;
            }
        }
        if (i == message.size()) return true;
    }
    return false;
}

class ServedBinary {
public:
    explicit ServedBinary(const std::vector<std::string>& flags) : child_(serve_argv(flags)) {
        const std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
        std::string line;
        while (port_ == 0 && child_.read_line(line, 60000)) {
            std::smatch m;
            if (std::regex_search(line, m, listening)) port_ = std::stoi(m[1]);
        }
        REQUIRE(port_ > 0);
        int status = 0;
        for (int i = 0; i < 3000 && status != 200; ++i) {
            auto h = client().Get("/health");
            status = h ? h->status : 0;
            if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        REQUIRE(status == 200);
    }
    ~ServedBinary() {
        child_.kill(SIGTERM);
        child_.wait();
    }
    httplib::Client client() const {
        httplib::Client c("127.0.0.1", port_);
        c.set_read_timeout(120, 0);
        c.set_connection_timeout(30, 0);
        return c;
    }
    json post(const std::string& path, const json& body) const {
        auto res = client().Post(path.c_str(), body.dump(), "application/json");
        REQUIRE(res);
        INFO(res->body);
        REQUIRE(res->status == 200);
        return json::parse(res->body);
    }
    json get(const std::string& path) const {
        auto res = client().Get(path.c_str());
        REQUIRE(res);
        REQUIRE(res->status == 200);
        return json::parse(res->body);
    }
    std::string metrics_text() const {
        auto res = client().Get("/metrics");
        REQUIRE(res);
        REQUIRE(res->status == 200);
        return res->body;
    }

private:
    anvil::test::ChildProcess child_;
    int port_ = 0;
};

// Prometheus text to {"name{labels}": value}.
std::map<std::string, double> parse_metrics(const std::string& text) {
    std::map<std::string, double> out;
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
        if (line.empty() || line[0] == '#') continue;
        const auto space = line.rfind(' ');
        out[line.substr(0, space)] = std::stod(line.substr(space + 1));
    }
    return out;
}

// An in-process server for an Engine, on a free loopback port.
struct ServedEngine : anvil::test::engine::InProcessServer {
    ServedEngine(const fs::path& model_dir, const EngineOptions& options)
        : InProcessServer(model_dir, options, server_options()) {}
    static ServerOptions server_options() {
        ServerOptions o;
        o.served_model_name = "tiny";
        o.http_threads = 32;
        o.heartbeat_ms = 5;
        return o;
    }
};


// What a client sees of a response, whole or streamed: each choice's text and finish reason, the
// usage, and for chat with logprobs the tokens' logprobs.
json client_view(const json& body, bool stream, bool chat, const std::string& raw) {
    json view = {{"choices", json::object()}, {"usage", nullptr}};
    auto add = [&](const json& c) {
        json& v = view["choices"][std::to_string(c["index"].get<int>())];
        if (v.is_null()) v = {{"text", ""}, {"finish_reason", nullptr}, {"logprobs", json::array()}};
        if (chat) {
            const json& part = stream ? c["delta"] : c["message"];
            if (part.contains("content") && part["content"].is_string())
                v["text"] = v["text"].get<std::string>() + part["content"].get<std::string>();
        } else {
            v["text"] = v["text"].get<std::string>() + c["text"].get<std::string>();
        }
        if (!c["finish_reason"].is_null()) v["finish_reason"] = c["finish_reason"];
        if (c.contains("logprobs") && !c["logprobs"].is_null()) v["logprobs"].push_back(c["logprobs"]);
    };
    if (!stream) {
        for (const auto& c : body["choices"]) add(c);
        view["usage"] = body["usage"];
        return view;
    }
    const auto events = sse_events(raw);
    REQUIRE(!events.empty());
    CHECK(events.back() == "[DONE]");
    for (size_t i = 0; i + 1 < events.size(); ++i) {
        const json chunk = json::parse(events[i]);
        for (const auto& c : chunk["choices"]) add(c);
        if (chunk.contains("usage") && !chunk["usage"].is_null()) view["usage"] = chunk["usage"];
    }
    return view;
}

}  // namespace

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

// =============================================================================================
// 3b. Sampling: the output's distribution with a draft is the target's.

TEST_CASE("speculative: the chi-square helpers give the textbook values", "[speculative][stats]") {
    CHECK(chi2_p_value(24.322, 7) == Approx(0.001).epsilon(0.01));
    CHECK(chi2_p_value(3.841, 1) == Approx(0.05).epsilon(0.01));
    CHECK(chi2_p_value(124.342, 100) == Approx(0.05).epsilon(0.01));
    CHECK(chi2_p_value(0, 5) == 1.0);
    // Two samples of one distribution pass; of two different ones fail.
    std::map<Key, int> a = {{{1}, 500}, {{2}, 300}, {{3}, 200}}, b = {{{1}, 510}, {{2}, 290}, {{3}, 200}},
                       c = {{{1}, 400}, {{2}, 350}, {{3}, 250}};
    CHECK(two_sample(a, b).p > 0.5);
    CHECK(two_sample(a, c).p < 0.001);
}

TEST_CASE("speculative: sampled tokens with a draft follow the target's distribution (two-sample chi-square over 3000 seeds)",
          "[speculative][stats]") {
    // Temperature 1 over the 8 likeliest tokens, 3 tokens a request: the first comes from the
    // prompt's prefill (no draft), the second from the speculative rule (one draft, the lookahead
    // max_tokens - 1 - 1 allows), the third from the target after an accepted draft or from the
    // next step after a rejected one. Seeds 1..3000 without a draft, 3001..6000 with one: the
    // statistics are fixed numbers (the kernels give a row the same logits in any batch).
    constexpr int kSeeds = 3000;
    constexpr double kAlpha = 0.001;
    SamplingParams params;
    params.temperature = 1.0f;
    params.top_k = 8;
    params.max_tokens = 3;
    params.ignore_eos = true;
    EngineOptions o = engine_options();
    o.max_seqs = 16;
    o.max_batch_tokens = 256;
    o.block_size = 16;

    // Prompt lookup needs the sampled token to occur earlier: a prompt ending in the model's own
    // greedy loop (its continuation of "Hello" repeats one token) makes that common.
    std::vector<int32_t> looping;
    {
        Engine plain(model("plain"), o);
        looping = plain.tokenizer().encode("Hello", true);
        const Choice c = run_requests(plain, {{"loop", looping, greedy(14), 1}})[0][0];
        looping.insert(looping.end(), c.tokens.begin(), c.tokens.end());
    }
    struct Case {
        std::string name;
        DraftOptions draft;
        std::vector<int32_t> prompt;
    };
    const std::vector<int32_t> hello = Engine(model("plain"), o).tokenizer().encode("Hello there, how are you", true);
    const std::vector<Case> cases = {
        {"layers 1 on a plain model (q far from p)", draft_layers(1, 4), hello},
        {"another model (q unrelated to p)", draft_model(model("other-seed"), 4), hello},
        {"prompt lookup (q a point mass)", draft_ngram(1, 4), looping},
    };
    std::map<std::vector<int32_t>, std::vector<std::vector<int32_t>>> without;
    for (const Case& c : cases) {
        INFO(c.name);
        if (!without.count(c.prompt)) {
            Engine plain(model("plain"), o);
            without[c.prompt] = sampled_tokens(plain, c.prompt, params, kSeeds, 1);
        }
        const auto& p_samples = without[c.prompt];

        EngineOptions od = o;
        od.draft = c.draft;
        Engine drafted(model("plain"), od);
        // Other seeds than the target's sample: the two samples are independent, as the test
        // assumes (with the same seeds a point-mass draft, which draws nothing, would make many
        // draws coincide and the test blind).
        const auto q_samples = sampled_tokens(drafted, c.prompt, params, kSeeds, kSeeds + 1);
        settle(drafted);
        const uint64_t proposed = drafted.metrics().draft_proposed.load(), accepted = drafted.metrics().draft_accepted.load();
        CAPTURE(proposed, accepted);
        // The rule ran both ways many times: drafts accepted and drafts replaced from the residual.
        CHECK(proposed >= uint64_t(kSeeds / 10));
        CHECK(accepted >= proposed / 50);
        CHECK(accepted < proposed);
        for (const std::vector<size_t>& positions : {std::vector<size_t>{1}, std::vector<size_t>{2}, std::vector<size_t>{1, 2},
                                                     std::vector<size_t>{0, 1}}) {
            const TwoSample t = two_sample(counts(p_samples, positions), counts(q_samples, positions));
            INFO("tokens at " << positions.front() << (positions.size() > 1 ? "+" : "") << ": chi2 " << t.chi2 << ", df "
                              << t.df << ", p " << t.p << "\n" << t.table);
            CHECK(t.df >= 4);
            CHECK(t.p > kAlpha);
        }
    }

    // The test can fail: tokens from the draft's own distribution (what "always accept" would
    // give: the plain model cut after its first layer, sampled by itself) are told apart.
    Engine first(first_layer_of_plain(), o);
    const auto q_only = sampled_tokens(first, hello, params, kSeeds, kSeeds + 1);
    const auto& p_samples = without[hello];
    for (size_t position : {1u, 2u}) {
        const TwoSample t = two_sample(counts(p_samples, {position}), counts(q_only, {position}));
        INFO("the draft's own tokens at " << position << ": chi2 " << t.chi2 << ", df " << t.df << ", p " << t.p);
        CHECK(t.p < kAlpha);
    }
}

// =============================================================================================
// 5. The server: lossless over HTTP (streamed and whole), the command line's refusals, and what
// /v1/models and /metrics say.

TEST_CASE("speculative: over HTTP, streamed and whole responses with a draft are those without one", "[speculative][server]") {
    EngineOptions o = engine_options();
    o.max_seqs = 4;
    const std::vector<std::pair<std::string, json>> bodies = {
        {"/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Tell me about the sea"}}}}, {"max_tokens", 24},
                                  {"temperature", 0}, {"ignore_eos", true}, {"logprobs", true}, {"top_logprobs", 2}}},
        {"/v1/completions", {{"prompt", "The quick brown fox"}, {"max_tokens", 30}, {"temperature", 0}, {"n", 2}}},
        {"/v1/completions", {{"prompt", "Hello world"}, {"max_tokens", 2}, {"temperature", 0}}},
        {"/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "What is two plus two?"}}}}, {"max_tokens", 20},
                                  {"temperature", 0}, {"stop", {" two", "e"}}}},
        {"/v1/completions", {{"prompt", "1 2 3 1 2 3 1 2 3"}, {"max_tokens", 17}, {"temperature", 0}, {"ignore_eos", true},
                             {"logprobs", 2}}},
    };
    // Every request twice: whole and streamed (with usage), all at once. The threads only talk
    // HTTP; Catch's assertions stay on this thread (they are not thread-safe).
    const auto views = [&](ServedEngine& served) {
        std::vector<std::future<std::pair<int, std::string>>> replies;
        for (const auto& [path, body] : bodies)
            for (bool stream : {false, true})
                replies.push_back(std::async(std::launch::async, [&, path = path, body = body, stream] {
                    json b = body;
                    if (stream) {
                        b["stream"] = true;
                        b["stream_options"] = {{"include_usage", true}};
                    }
                    auto res = served.client().Post(path.c_str(), b.dump(), "application/json");
                    return res ? std::make_pair(res->status, res->body) : std::make_pair(0, std::string());
                }));
        std::vector<json> out;
        for (size_t i = 0; i < replies.size(); ++i) {
            const auto [status, body] = replies[i].get();
            INFO(body);
            REQUIRE(status == 200);
            const bool stream = i % 2 == 1, chat = bodies[i / 2].first == "/v1/chat/completions";
            out.push_back(client_view(stream ? json() : json::parse(body), stream, chat, body));
        }
        return out;
    };
    std::vector<json> expected;
    {
        ServedEngine plain(model("early"), o);
        expected = views(plain);
    }
    for (size_t i = 0; i < expected.size(); i += 2) {
        // Whole and streamed agree on the text, the finish and the usage.
        INFO(expected[i].dump() << "\n" << expected[i + 1].dump());
        CHECK(expected[i]["usage"] == expected[i + 1]["usage"]);
        for (const auto& [index, c] : expected[i]["choices"].items()) {
            CHECK(c["text"] == expected[i + 1]["choices"][index]["text"]);
            CHECK(c["finish_reason"] == expected[i + 1]["choices"][index]["finish_reason"]);
        }
    }
    for (const DraftOptions& d : {draft_layers(1, 4), draft_self(WeightFormat::Q8, 16), draft_ngram(2, 3)}) {
        INFO("draft " << d.describe().dump());
        o.draft = d;
        ServedEngine served(model("early"), o);
        const std::vector<json> got = views(served);
        REQUIRE(got.size() == expected.size());
        for (size_t i = 0; i < got.size(); ++i) {
            INFO(bodies[i / 2].first << " " << bodies[i / 2].second.dump() << (i % 2 ? " streamed" : " whole"));
            CHECK(got[i] == expected[i]);
        }
        check_idle(served.engine());
    }
}

TEST_CASE("speculative: anvil-engine serve refuses impossible or conflicting draft flags with one clear line",
          "[speculative][server]") {
    const std::string target = model("plain").string();
    struct Refusal {
        std::vector<std::string> flags;
        int status;  // 2: a usage error, found in the flags; 1: found loading the models
        std::string message;  // '*' stands for a number
    };
    const std::vector<Refusal> refusals = {
        {{"--draft-self", "q8", "--draft-ngram", "2"}, 2,
         "--draft-self, --draft-model, --draft-layers and --draft-ngram each name a draft; give one"},
        {{"--draft-layers", "1", "--draft-model", model("other-seed").string()}, 2, "each name a draft; give one"},
        {{"--draft-ngram", "2", "--draft-tokens", "0"}, 2, "--draft-tokens 0: expected 1 to 16"},
        {{"--draft-layers", "1", "--draft-tokens", "17"}, 2, "--draft-tokens 17: expected 1 to 16"},
        {{"--draft-layers", "0"}, 2, "--draft-layers 0: expected at least 1"},
        {{"--draft-weights", "q8"}, 2, "--draft-weights applies to --draft-model only"},
        {{"--draft-layers", "2"}, 1,
         "--draft-layers 2: expected 1 to 1 (the model has 2 layers; the draft must be shorter than the target)"},
        {{"--draft-layers", "5"}, 1, "--draft-layers 5: expected 1 to 1"},
        {{"--draft-self", "f32"}, 1, "--draft-self: expected q8 or bf16"},
        {{"--draft-self", "q4"}, 1, "q4"},
        {{"--draft-model", model("small").string()}, 1,
         "its tokenizer is not the target's (vocabulary of * tokens, the target's has *); a draft must share the "
         "target's vocabulary and merges"},
        {{"--draft-model", (model("plain").parent_path() / "missing").string()}, 1, "missing"},
        {{"--draft-ngram", "65"}, 1, "--draft-ngram 65: expected 1 to 64 tokens"},
    };
    REQUIRE(matches("x: vocabulary of 370 tokens", "vocabulary of * tokens"));
    REQUIRE_FALSE(matches("x: vocabulary of many tokens", "vocabulary of * tokens"));
    for (const Refusal& r : refusals) {
        std::vector<std::string> flags = {"--model", target, "--port", "0", "--threads", "1", "--max-context", "128"};
        flags.insert(flags.end(), r.flags.begin(), r.flags.end());
        // Under a timeout: a server that fails to load must exit by itself, not hang.
        std::vector<std::string> argv = {"timeout", "-s", "KILL", "60"};
        for (const auto& a : serve_argv(flags)) argv.push_back(a);
        const auto result = anvil::test::run(argv);
        std::string joined;
        for (const auto& f : r.flags) joined += f + " ";
        INFO(joined << "\n" << result.output);
        CHECK(result.exit_code == r.status);
        const auto lines = error_lines(result.output);
        // One line says what is wrong, naming the flag.
        REQUIRE(lines.size() == 1);
        CHECK(matches(lines[0], r.message));
        CHECK_THAT(lines[0], Catch::StartsWith("anvil-engine serve: "));
    }
}

TEST_CASE("speculative: anvil-engine serve --draft-layers reports the draft in /v1/models and its counters in /metrics",
          "[speculative][server]") {
    ServedBinary served({"--model", model("early").string(), "--port", "0", "--threads", "1", "--max-context", "128",
                         "--max-seqs", "3", "--served-model-name", "early", "--draft-layers", "1", "--draft-tokens", "3"});
    const json models = served.get("/v1/models");
    REQUIRE(models["data"].size() == 1);
    CHECK(models["data"][0]["id"] == "early");
    CHECK(models["data"][0]["draft"] == json({{"kind", "layers"}, {"tokens", 3}, {"layers", 1}}));

    // Before any request the counters are there, at zero.
    auto m = parse_metrics(served.metrics_text());
    const std::string label = "{model=\"early\",draft=\"layers\"}";
    for (const char* name : {"anvil_engine_draft_proposed_tokens_total", "anvil_engine_draft_accepted_tokens_total",
                             "anvil_engine_draft_verifications_total", "anvil_engine_draft_seconds_total",
                             "anvil_engine_draft_acceptance_ratio", "anvil_engine_draft_mean_accepted_tokens"}) {
        INFO(name);
        REQUIRE(m.count(name + label));
        CHECK(m[name + label] == 0);
    }
    const std::string help = served.metrics_text();
    CHECK_THAT(help, Catch::Contains("# TYPE anvil_engine_draft_proposed_tokens_total counter") &&
                         Catch::Contains("# TYPE anvil_engine_draft_acceptance_ratio gauge"));

    std::vector<std::future<std::pair<int, std::string>>> replies;
    for (int i = 0; i < 6; ++i)
        replies.push_back(std::async(std::launch::async, [&, i] {
            const json body = {{"prompt", "The quick brown fox " + std::to_string(i)}, {"max_tokens", 20 + i},
                               {"temperature", i % 2 ? 0.0 : 0.8}, {"seed", i}, {"ignore_eos", true}};
            auto res = served.client().Post("/v1/completions", body.dump(), "application/json");
            return res ? std::make_pair(res->status, res->body) : std::make_pair(0, std::string());
        }));
    int generated = 0;
    for (auto& r : replies) {
        const auto [status, body] = r.get();
        INFO(body);
        REQUIRE(status == 200);
        generated += json::parse(body)["usage"]["completion_tokens"].get<int>();
    }
    CHECK(generated == 20 + 21 + 22 + 23 + 24 + 25);
    // A last request served alone: the counters of the earlier ones are complete once it is back.
    served.post("/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 1}});

    m = parse_metrics(served.metrics_text());
    const double proposed = m["anvil_engine_draft_proposed_tokens_total" + label],
                 accepted = m["anvil_engine_draft_accepted_tokens_total" + label],
                 verifications = m["anvil_engine_draft_verifications_total" + label],
                 ratio = m["anvil_engine_draft_acceptance_ratio" + label],
                 mean = m["anvil_engine_draft_mean_accepted_tokens" + label];
    CAPTURE(proposed, accepted, verifications, ratio, mean);
    CHECK(proposed > 0);
    CHECK(accepted > 0);
    CHECK(proposed >= accepted);
    CHECK(verifications > 0);
    CHECK(proposed <= 3 * verifications);  // at most K a verification
    CHECK(ratio >= 0);
    CHECK(ratio <= 1);
    CHECK(ratio == Approx(accepted / proposed).epsilon(1e-4));  // printed with 6 digits
    CHECK(mean == Approx(accepted / verifications).epsilon(1e-4));
    CHECK(m["anvil_engine_draft_seconds_total" + label] > 0);
    // Every token generated came from a verification or a plain step, and the drafts saved steps:
    // fewer forward passes than tokens.
    CHECK(m["anvil_engine_generation_tokens_total{model=\"early\"}"] == generated + 1);
    CHECK(m["anvil_engine_steps_total{model=\"early\"}"] < generated);
    CHECK(m["anvil_engine_kv_blocks_used{model=\"early\"}"] == 0);
    CHECK(m["anvil_engine_requests_running{model=\"early\"}"] == 0);
}

TEST_CASE("speculative: /v1/models describes each draft kind, and a server without one says nothing of drafts",
          "[speculative][server]") {
    {
        ServedBinary plain({"--model", model("plain").string(), "--port", "0", "--threads", "1", "--max-context", "64"});
        const json models = plain.get("/v1/models");
        CHECK_FALSE(models["data"][0].contains("draft"));
        CHECK_THAT(plain.metrics_text(), !Catch::Contains("anvil_engine_draft"));
    }
    const std::vector<std::pair<std::vector<std::string>, json>> kinds = {
        {{"--draft-self", "q8"}, {{"kind", "self"}, {"tokens", 4}, {"weights", "q8"}}},
        {{"--draft-self", "bf16", "--draft-tokens", "16"}, {{"kind", "self"}, {"tokens", 16}, {"weights", "bf16"}}},
        {{"--draft-model", model("other-seed").string(), "--draft-weights", "bf16", "--draft-tokens", "1"},
         {{"kind", "model"}, {"tokens", 1}, {"model", "other-seed"}, {"weights", "bf16"}}},
        {{"--draft-ngram", "3", "--draft-tokens", "5"}, {{"kind", "ngram"}, {"tokens", 5}, {"ngram", 3}}},
    };
    for (const auto& [flags, draft] : kinds) {
        std::vector<std::string> argv = {"--model", model("plain").string(), "--port", "0", "--threads", "1", "--max-context", "64"};
        argv.insert(argv.end(), flags.begin(), flags.end());
        ServedBinary served(argv);
        INFO(draft.dump());
        CHECK(served.get("/v1/models")["data"][0]["draft"] == draft);
        served.post("/v1/completions", {{"prompt", "1 2 3 1 2 3 1 2"}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}});
        served.post("/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 1}});
        auto m = parse_metrics(served.metrics_text());
        const std::string label = "{model=\"plain\",draft=\"" + draft["kind"].get<std::string>() + "\"}";
        CHECK(m.count("anvil_engine_draft_proposed_tokens_total" + label));
        CHECK(m["anvil_engine_draft_accepted_tokens_total" + label] <= m["anvil_engine_draft_proposed_tokens_total" + label]);
        CHECK(m["anvil_engine_draft_acceptance_ratio" + label] <= 1);
    }
}

TEST_CASE("speculative: the draft counters never show more tokens accepted than proposed, even read the moment a reply ends",
          "[speculative][metrics]") {
    // A scrape can come at any time; a client that has its reply and scrapes at once is the
    // likeliest to land right after the last verification's tokens were sent.
    Engine engine(model("early"), engine_options(draft_layers(1, 16)));
    const std::vector<int32_t> prompt = engine.tokenizer().encode("The quick brown fox", true);
    int violations = 0;
    for (int i = 0; i < 40; ++i) {
        // Two choices finishing in the same step: this thread is still busy with the first's
        // events when the second's last one arrives, and reads the counters at once.
        auto stream = engine.submit(prompt, greedy(10 + i % 7), 2);
        for (int done = 0; done < 2;) {
            auto event = stream->pop(std::chrono::milliseconds(120000));
            REQUIRE(event);
            if (event->done) ++done;
        }
        const uint64_t accepted = engine.metrics().draft_accepted.load(), proposed = engine.metrics().draft_proposed.load();
        if (accepted > proposed) ++violations;
    }
    CHECK(violations == 0);
    settle(engine);
    CHECK(engine.metrics().draft_accepted.load() <= engine.metrics().draft_proposed.load());
}
