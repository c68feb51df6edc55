// Prefix caching's effect on time to first token, both sides measured in this run: the bench
// model in the engine, chat requests sharing a 2,000-token system prompt and each asking its own
// short question, with the cache and without it (the baseline). The first request with the cache
// computes the system prompt and is reported apart; the rest find it in the cache.
//
// usage: bench_prefix_cache [--threads N] [--keep DIR] [--requests N]
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "engine/engine.hpp"
#include "engine/make_model.hpp"
#include "bench_support.hpp"
#include "kernels/cpu_features.hpp"
#include "test_support.hpp"

using namespace anvil::engine;
using Clock = std::chrono::steady_clock;

namespace {

// A system prompt of about `tokens` tokens: varied sentences, so it is not one repeated pattern.
std::string system_prompt(const Tokenizer& tokenizer, int tokens) {
    const char* sentences[] = {"You are a careful assistant for a team that runs language models on its own machines. ",
                               "Answer in short paragraphs and say when you are unsure. ",
                               "Prefer measured numbers to guesses, and name the source of each figure. ",
                               "When a question is ambiguous, state the reading you chose before answering. ",
                               "Keep code examples minimal and runnable, with their commands. "};
    std::string text;
    for (int i = 0; int(tokenizer.encode(text).size()) < tokens; ++i) text += sentences[i % 5] + std::to_string(i) + " ";
    return text;
}

struct Ttft {
    double first_ms;   // the first request
    double median_ms;  // the others
};

Ttft measure(const std::filesystem::path& model, int threads, bool caching, int requests) {
    EngineOptions options;
    options.max_context = 4096;
    options.max_seqs = 1;
    options.threads = threads;
    options.weights = WeightFormat::Q8;
    options.prefix_caching = caching;
    Engine engine(model, options);
    const ChatTemplate* chat = engine.chat_template();
    if (!chat) throw std::runtime_error("the bench model has no chat template: " + engine.chat_template_error());
    const std::string system = system_prompt(engine.tokenizer(), 2000);
    std::vector<double> ms;
    for (int r = 0; r < requests; ++r) {
        const std::vector<ChatMessage> messages = {{"system", system},
                                                   {"user", "Question " + std::to_string(r) + ": how fast is the first token?"}};
        std::vector<int32_t> prompt = engine.tokenizer().encode(chat->render(messages), false);
        SamplingParams params;
        params.temperature = 0;
        params.max_tokens = 1;
        const auto start = Clock::now();
        auto stream = engine.submit(std::move(prompt), params);
        while (auto e = stream->pop(std::chrono::seconds(120))) {
            if (!e->tokens.empty() || e->done) break;
        }
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
    std::vector<double> rest(ms.begin() + 1, ms.end());
    std::sort(rest.begin(), rest.end());
    return {ms[0], rest[rest.size() / 2]};
}

}  // namespace

int main(int argc, char** argv) {
    int threads = omp_get_max_threads(), requests = 6;
    std::string keep;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--keep")) keep = argv[i + 1];
        else if (!std::strcmp(argv[i], "--requests")) requests = std::max(2, std::atoi(argv[i + 1]));
    }
    spdlog::set_level(spdlog::level::warn);
    anvil::test::TempDir scratch;
    const std::filesystem::path model = keep.empty() ? scratch / "bench" : std::filesystem::path(keep);
    if (!std::filesystem::exists(model / "config.json")) make_model({model, "bench", "llama", "f32", 1, 1});
    std::printf("bench_prefix_cache: %s kernels, %d threads, load average %s, a 2000-token system prompt, %d requests\n",
                anvil::kernels::isa_name(anvil::kernels::active_isa()).c_str(), threads, anvil::bench::load_average().c_str(),
                requests);
    const Ttft off = measure(model, threads, false, requests);
    const Ttft on = measure(model, threads, true, requests);
    std::printf("baseline  TTFT without prefix caching       %9.1f ms (median; the first %.1f ms)\n", off.median_ms, off.first_ms);
    std::printf("cached    TTFT with it, the first request   %9.1f ms   ratio %.2f (computes the system prompt)\n", on.first_ms,
                on.first_ms / off.median_ms);
    std::printf("cached    TTFT with it, the later requests  %9.1f ms   ratio %.3f (%.1fx faster)\n", on.median_ms,
                on.median_ms / off.median_ms, off.median_ms / on.median_ms);
    std::printf("load average at the end %s\n", anvil::bench::load_average().c_str());
    return 0;
}
