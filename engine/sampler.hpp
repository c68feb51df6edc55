// Choosing the next token from logits: logit bias, greedy, temperature, top-k, top-p, each request
// with its own seeded generator; and the log-probabilities a client can ask for.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace anvil::engine {

class JsonGrammar;

// OpenAI's logit_bias: `bias` (-100..100) added to token `token`'s logit before anything else.
struct LogitBias {
    int32_t token = 0;
    float bias = 0.0f;
};

struct SamplingParams {
    float temperature = 1.0f;  // 0: greedy
    int top_k = 0;             // 0: no limit
    float top_p = 1.0f;
    uint64_t seed = 0;
    int max_tokens = 16;
    std::vector<std::string> stop;
    bool ignore_eos = false;
    int logprobs = -1;  // -1: none; otherwise how many alternatives (top_logprobs) besides the chosen token
    int prompt_logprobs = -1;  // -1: none; otherwise the prompt tokens' logprobs too, with this many alternatives
    std::vector<LogitBias> logit_bias;  // by token id, each id once; the engine refuses ids outside its vocabulary
    // response_format json_object or json_schema: only tokens that keep the answer valid JSON of
    // the grammar are sampled (after the bias), and the answer ends when the value is whole.
    std::shared_ptr<const JsonGrammar> grammar;
};

// A small, fast, reproducible generator (xoshiro256**), seeded by splitmix64.
class Rng {
public:
    explicit Rng(uint64_t seed = 0);
    uint64_t next();
    double uniform();  // [0, 1)

private:
    uint64_t s_[4];
};

struct TokenLogprob {
    int32_t token = -1;
    float logprob = 0.0f;
};

// Scratch space for one sequence's sampling, sized for the vocabulary once.
struct SamplerScratch {
    std::vector<float> probs;
    std::vector<int32_t> order;
    std::vector<float> biased;  // [vocab]: a row of logits with a request's logit_bias added
    void reserve(int vocab) {
        probs.resize(size_t(vocab));
        order.resize(size_t(vocab));
        biased.resize(size_t(vocab));
    }
};

// The logits a request samples from: `logits` itself when it has no bias (no copy), otherwise a
// copy in scratch.biased with each bias added. Every bias's token must be below `vocab`.
const float* apply_logit_bias(const float* logits, int vocab, const std::vector<LogitBias>& bias, SamplerScratch& scratch);

int32_t sample_token(const float* logits, int vocab, const SamplingParams& params, Rng& rng, SamplerScratch& scratch);

// Greedy choice: the params ask for no randomness (temperature 0 or top_k 1).
inline bool is_greedy(const SamplingParams& params) { return params.temperature <= 0.0f || params.top_k == 1; }
// The first largest logit: what greedy sampling picks.
int32_t argmax_token(const float* logits, int vocab);

// The distribution sample_token draws from, written densely to `out` [vocab]: the temperature,
// top-k and top-p candidates with their normalized probabilities, 0 elsewhere. Greedy params give
// a point mass on argmax_token. The speculative rule compares these distributions.
void sampling_distribution(const float* logits, int vocab, const SamplingParams& params, SamplerScratch& scratch,
                           float* out);

// log softmax(logits)[token] of the distribution `logits` gives (the engine passes them with the
// request's logit_bias added, before temperature), and the
// `top` most likely tokens with theirs, most likely first.
float token_logprob(const float* logits, int vocab, int32_t token);
std::vector<TokenLogprob> top_logprobs(const float* logits, int vocab, int top);

}  // namespace anvil::engine
