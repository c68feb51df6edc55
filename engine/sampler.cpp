#include "engine/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace anvil::engine {

Rng::Rng(uint64_t seed) {
    for (auto& s : s_) {
        uint64_t z = (seed += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        s = z ^ (z >> 31);
    }
}

uint64_t Rng::next() {
    const auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
}

double Rng::uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }

namespace {
int32_t argmax(const float* logits, int vocab) {
    int32_t best = 0;
    for (int i = 1; i < vocab; ++i)
        if (logits[i] > logits[best]) best = i;
    return best;
}

double log_sum_exp(const float* logits, int vocab) {
    float largest = logits[0];
    for (int i = 1; i < vocab; ++i) largest = std::max(largest, logits[i]);
    double sum = 0;
    for (int i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - largest);
    return largest + std::log(sum);
}
}  // namespace

const float* apply_logit_bias(const float* logits, int vocab, const std::vector<LogitBias>& bias, SamplerScratch& scratch) {
    if (bias.empty()) return logits;
    scratch.reserve(vocab);
    float* out = scratch.biased.data();
    std::copy(logits, logits + vocab, out);
    for (const LogitBias& b : bias) out[b.token] += b.bias;
    return out;
}

namespace {
// The candidates sample_token chooses among: scratch.order[0..n) by probability (ties by id),
// scratch.probs their unnormalized weights, `kept` their sum. Not for greedy params.
int candidates(const float* logits, int vocab, const SamplingParams& params, SamplerScratch& scratch, double& kept) {
    scratch.reserve(vocab);
    float* probs = scratch.probs.data();
    int32_t* order = scratch.order.data();
    float largest = logits[0];
    for (int i = 1; i < vocab; ++i) largest = std::max(largest, logits[i]);
    for (int i = 0; i < vocab; ++i) probs[i] = std::exp((logits[i] - largest) / params.temperature);
    std::iota(order, order + vocab, 0);
    // Candidates by probability, ties by id, so that the choice depends only on the logits and seed.
    const auto better = [probs](int32_t a, int32_t b) { return probs[a] != probs[b] ? probs[a] > probs[b] : a < b; };
    int n = vocab;
    if (params.top_k > 0 && params.top_k < vocab) {
        std::partial_sort(order, order + params.top_k, order + vocab, better);
        n = params.top_k;
    } else {
        std::sort(order, order + vocab, better);
    }
    // Tokens with no probability at all (masked to -inf by a grammar) are never candidates, not
    // even as the fallback when rounding leaves the draw past the end.
    while (n > 1 && probs[order[n - 1]] == 0.0f) --n;
    kept = 0;
    for (int i = 0; i < n; ++i) kept += probs[order[i]];
    if (params.top_p < 1.0f) {
        double cumulative = 0;
        int cut = 0;
        while (cut < n) {
            cumulative += probs[order[cut++]] / kept;
            if (cumulative >= params.top_p) break;
        }
        n = std::max(cut, 1);
        kept = 0;
        for (int i = 0; i < n; ++i) kept += probs[order[i]];
    }
    return n;
}
}  // namespace

int32_t argmax_token(const float* logits, int vocab) { return argmax(logits, vocab); }

int32_t sample_token(const float* logits, int vocab, const SamplingParams& params, Rng& rng, SamplerScratch& scratch) {
    if (is_greedy(params)) return argmax(logits, vocab);
    double kept = 0;
    const int n = candidates(logits, vocab, params, scratch, kept);
    const float* probs = scratch.probs.data();
    const int32_t* order = scratch.order.data();
    double target = rng.uniform() * kept;
    for (int i = 0; i < n; ++i) {
        target -= probs[order[i]];
        if (target < 0) return order[i];
    }
    return order[n - 1];
}

void sampling_distribution(const float* logits, int vocab, const SamplingParams& params, SamplerScratch& scratch,
                           float* out) {
    std::fill(out, out + vocab, 0.0f);
    if (is_greedy(params)) {
        out[argmax(logits, vocab)] = 1.0f;
        return;
    }
    double kept = 0;
    const int n = candidates(logits, vocab, params, scratch, kept);
    for (int i = 0; i < n; ++i) {
        const int32_t t = scratch.order[size_t(i)];
        out[t] = float(double(scratch.probs[size_t(t)]) / kept);
    }
}

float token_logprob(const float* logits, int vocab, int32_t token) {
    return float(double(logits[token]) - log_sum_exp(logits, vocab));
}

std::vector<TokenLogprob> top_logprobs(const float* logits, int vocab, int top) {
    top = std::min(top, vocab);
    std::vector<TokenLogprob> out;
    if (top <= 0) return out;
    const double normaliser = log_sum_exp(logits, vocab);
    // A running list of the best `top`, kept sorted; top is small (OpenAI allows up to 20).
    for (int i = 0; i < vocab; ++i) {
        if (int(out.size()) == top && logits[i] <= out.back().logprob) continue;
        if (!std::isfinite(logits[i])) continue;  // a token a grammar rules out is no alternative
        TokenLogprob entry{i, logits[i]};
        auto at = std::upper_bound(out.begin(), out.end(), entry,
                                   [](const TokenLogprob& a, const TokenLogprob& b) { return a.logprob > b.logprob; });
        out.insert(at, entry);
        if (int(out.size()) > top) out.pop_back();
    }
    for (auto& e : out) e.logprob = float(double(e.logprob) - normaliser);
    return out;
}

}  // namespace anvil::engine
