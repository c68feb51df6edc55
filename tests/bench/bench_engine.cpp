// Engine speed on the `bench` model, each figure beside the baseline measured in the same run:
// the machine's read bandwidth. Decode at batch 1 reads every weight once per token, so bandwidth /
// bytes-per-token is the ceiling it is compared with, the bandwidth measured on a buffer of those
// bytes (bench_bandwidth.hpp: a large cache can hold them).
//
// usage: bench_engine [--threads N] [--tokens N] [--keep DIR] [--weights f32,bf16,q8] [--served yes|no]
//                     [--depth N] [--kv-dtype f32|bf16] [--rounds N]
//        (default: all cores, 32 tokens, f32, bf16 and q8, the served figures too). --depth decodes
//        after an N-token prompt rather than 16 (a long context, where attention reads the KV cache
//        of every position each token: its bytes count in MB/token beside the weights); --kv-dtype
//        is the cache's type, as anvil-engine serve's (default f32). --rounds N measures each
//        format's decode and its ceiling N times, one right after the other, and adds the median of
//        the N fractions: a host whose bandwidth swings within seconds moves a lone pair (default 1).
//        --weights also
//        takes GGUF file types (q8_0, q4_0, q4_k_m, q6_k, f16): the bench model is written as that
//        GGUF file (anvil-engine convert) and served from it as stored, as `--model FILE.gguf` is.
//        bench_engine --draft self-q8,self-bf16,model,layers,ngram [--draft-tokens K] [--tokens N]
//        speculative decoding instead (bench_engine_draft.hpp; default K 4, 64 tokens)
//        bench_engine --device cuda:N [--preset bench|large] [--weights bf16,q8] [--tokens N]
//        the GPU runner instead, beside the device's own copy bandwidth (read + write) measured in
//        the same run: batch-1 decode against copy bandwidth / bytes per token, batch 32 aggregate
//        decode and a 2,048-token prefill in tokens/s. --preset large is a generated model with
//        Llama 3 8B's layer shapes and 20 layers (8.7 GB of bf16 weights), written once under --keep.
#include <omp.h>

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "engine/engine.hpp"
#include "engine/gguf_convert.hpp"
#include "engine/kv_cache.hpp"
#include "engine/make_model.hpp"
#include "engine/model_runner.hpp"
#include "engine/server.hpp"
#include "bench_bandwidth.hpp"
#include "bench_engine_draft.hpp"
#include "bench_support.hpp"
#include "kernels/cpu_features.hpp"
#ifdef ANVIL_HAVE_CUDA_KERNELS
#include "kernels/cuda/device.hpp"
#endif
#include "kernels/thread_policy.hpp"
#include "test_support.hpp"

using namespace anvil::engine;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// "f32,bf16,,q8" -> {"f32", "bf16", "q8"}
std::vector<std::string> comma_list(const std::string& text) {
    std::vector<std::string> items;
    for (size_t at = 0; at <= text.size();) {
        size_t end = text.find(',', at);
        if (end == std::string::npos) end = text.size();
        if (end > at) items.push_back(text.substr(at, end - at));
        at = end + 1;
    }
    return items;
}

struct DecodeResult {
    double tokens_per_second;
    double bytes_per_token;
    double cpu_share;  // CPU time the process got / (wall time x threads): 1.0 on a quiet machine
};

double process_cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

// Greedy decode of `tokens` tokens after a `depth`-token prompt, one sequence, straight on the runner.
DecodeResult decode(const ModelConfig& config, const ModelWeights& weights, int tokens, int depth,
                    anvil::kernels::KvType kv_type, const std::string& device = "cpu") {
    constexpr int kChunk = 256;  // prompt tokens a forward() carries
    RunnerOptions o;
    o.max_batch_tokens = std::min(depth, kChunk);
    o.max_logit_rows = 1;
    o.max_context = depth + tokens + 1;
    o.block_size = 16;
    o.kv_blocks = (o.max_context + 15) / 16;
    o.kv_type = kv_type;
    const auto made = make_runner(device, config, weights, o);
    Runner& runner = *made;
    std::vector<int32_t> table(size_t(o.kv_blocks));
    for (int b = 0; b < o.kv_blocks; ++b) table[size_t(b)] = b;
    Batch batch;
    for (int first = 0; first < depth; first += kChunk) {
        batch.clear();
        batch.block_tables = {table.data()};
        const int last = std::min(depth, first + kChunk);
        for (int p = first; p < last; ++p) {
            batch.tokens.push_back((p * 37) % 300);
            batch.positions.push_back(p);
            batch.sequence.push_back(0);
        }
        batch.logit_tokens = {last - first - 1};
        runner.forward(batch);
    }
    auto next = [&](int position) {
        const float* l = runner.logits(0);
        const int32_t token = int32_t(std::max_element(l, l + config.vocab_size) - l);
        batch.clear();
        batch.block_tables.push_back(table.data());
        batch.tokens.push_back(token);
        batch.positions.push_back(position);
        batch.sequence.push_back(0);
        batch.logit_tokens.push_back(0);
        runner.forward(batch);
    };
    next(depth);  // warm
    // Best of three runs over the same positions (the cache is simply overwritten), like the
    // bandwidth: on a shared machine the best run is the one least disturbed.
    double s = 1e30, share = 0;
    for (int trial = 0; trial < 3; ++trial) {
        const auto start = Clock::now();
        const double cpu = process_cpu_seconds();
        for (int i = 0; i < tokens; ++i) next(depth + 1 + i);
        const double wall = seconds_since(start);
        if (wall < s) s = wall, share = (process_cpu_seconds() - cpu) / (wall * omp_get_max_threads());
    }
    // Keys and values read per token at the average position, beside the weights.
    const double element = kv_type == anvil::kernels::KvType::F32 ? 4 : 2;
    const double kv = 2.0 * config.n_layers * config.kv_dim() * element * (depth + 1 + tokens / 2.0);
    return {tokens / s, double(weights.bytes_per_token()) + kv, share};
}

double prefill(const ModelConfig& config, const ModelWeights& weights, int length, const std::string& device = "cpu") {
    RunnerOptions o;
    o.max_batch_tokens = length;
    o.max_logit_rows = 1;
    o.max_context = length;
    o.block_size = 16;
    o.kv_blocks = length / 16 + 1;
    const auto made = make_runner(device, config, weights, o);
    Runner& runner = *made;
    std::vector<int32_t> table(size_t(o.kv_blocks));
    for (int b = 0; b < o.kv_blocks; ++b) table[size_t(b)] = b;
    Batch batch;
    batch.block_tables = {table.data()};
    for (int p = 0; p < length; ++p) {
        batch.tokens.push_back((p * 37) % 300);
        batch.positions.push_back(p);
        batch.sequence.push_back(0);
    }
    batch.logit_tokens = {length - 1};
    runner.forward(batch);  // warm
    const auto start = Clock::now();
    runner.forward(batch);
    return length / seconds_since(start);
}

#ifdef ANVIL_HAVE_CUDA_KERNELS
// Aggregate decode tokens per second of `sequences` sequences stepping together, each after a
// 16-token prompt: `tokens` steps of one token each, straight on the runner (no sampling).
double decode_batch(const ModelConfig& config, const ModelWeights& weights, int sequences, int tokens,
                    const std::string& device) {
    constexpr int kPrompt = 16;
    RunnerOptions o;
    o.max_batch_tokens = sequences * kPrompt;
    o.max_logit_rows = sequences;
    o.max_context = kPrompt + tokens + 1;
    o.block_size = 16;
    const int per_sequence = (o.max_context + 15) / 16;
    o.kv_blocks = sequences * per_sequence;
    const auto made = make_runner(device, config, weights, o);
    Runner& runner = *made;
    std::vector<std::vector<int32_t>> tables{size_t(sequences)};
    Batch batch;
    for (int s = 0; s < sequences; ++s) {
        for (int b = 0; b < per_sequence; ++b) tables[size_t(s)].push_back(s * per_sequence + b);
        batch.block_tables.push_back(tables[size_t(s)].data());
        for (int p = 0; p < kPrompt; ++p) {
            batch.tokens.push_back((p * 37 + s) % 300);
            batch.positions.push_back(p);
            batch.sequence.push_back(s);
        }
        batch.logit_tokens.push_back(batch.size() - 1);
    }
    runner.forward(batch);
    auto step = [&](int position) {
        batch.tokens.clear();
        batch.positions.clear();
        batch.sequence.clear();
        batch.logit_tokens.clear();
        for (int s = 0; s < sequences; ++s) {
            batch.tokens.push_back((position * 31 + s) % 300);
            batch.positions.push_back(position);
            batch.sequence.push_back(s);
            batch.logit_tokens.push_back(s);
        }
        runner.forward(batch);
    };
    step(kPrompt);  // warm (and the graph of this shape captured)
    double best = 1e30;
    for (int trial = 0; trial < 3; ++trial) {
        const auto start = Clock::now();
        for (int i = 0; i < tokens - 1; ++i) step(kPrompt + 1 + i);
        best = std::min(best, seconds_since(start));
    }
    return double(sequences) * (tokens - 1) / best;
}
#endif

// Aggregate generated tokens per second with `clients` concurrent streaming requests.
double served_throughput(const std::filesystem::path& model, const std::string& weights, int clients, int tokens) {
    EngineOptions o;
    o.max_seqs = 16;
    o.max_context = 256;
    o.max_batch_tokens = 256;
    o.weights = parse_weight_format(weights);
    Engine engine(model, o);
    Server server(ServerOptions{"127.0.0.1", 0, "bench", 40, 1000});
    const int port = server.bind();
    server.set_engine(&engine);
    std::thread serving([&] { server.serve(); });
    while (!server.running()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    auto one = [&](int i) {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(600, 0);
        c.set_connection_timeout(30, 0);
        nlohmann::json body = {{"prompt", "Request " + std::to_string(i) + ": the quick brown fox"},
                               {"max_tokens", tokens}, {"temperature", 0}, {"ignore_eos", true}};
        auto res = c.Post("/v1/completions", body.dump(), "application/json");
        if (!res) throw std::runtime_error("bench request failed: " + httplib::to_string(res.error()));
        if (res->status != 200) throw std::runtime_error("bench request failed: " + res->body);
        return nlohmann::json::parse(res->body)["usage"]["completion_tokens"].get<int>();
    };
    one(-1);  // warm
    const auto start = Clock::now();
    std::vector<std::future<int>> replies;
    for (int i = 0; i < clients; ++i) replies.push_back(std::async(std::launch::async, one, i));
    int generated = 0;
    for (auto& r : replies) generated += r.get();
    const double s = seconds_since(start);
    server.stop();
    serving.join();
    return generated / s;
}

#ifdef ANVIL_HAVE_CUDA_KERNELS
// The device's copy bandwidth, bytes read plus bytes written per second: best of five copies of a
// 1 GiB buffer on the device's own clock. The ceiling a memory-bound decode is measured against.
double device_copy_bandwidth(int device) {
    namespace cuda = anvil::kernels::cuda;
    cuda::Context context(device);
    constexpr size_t kBytes = size_t(1) << 30;
    cuda::DeviceArray<uint8_t> from(kBytes), to(kBytes);
    cuda::fill_bytes(context, from.data(), 1, kBytes);
    cuda::StreamTimer timer(context);
    double best = 1e30;
    for (int i = 0; i < 6; ++i) {
        timer.start();
        cuda::copy_async(context, to.data(), from.data(), kBytes);
        const double s = timer.stop_seconds();
        if (i > 0) best = std::min(best, s);  // the first copy warms
    }
    return 2.0 * double(kBytes) / best;
}
#endif

// bench_engine --device cuda:N: the GPU runner on the bench model (or --preset large), each
// figure beside the device's copy bandwidth measured here.
int run_on_device(const std::string& device, const std::string& preset, const std::filesystem::path& dir,
                  const std::string& formats, int tokens) {
#ifndef ANVIL_HAVE_CUDA_KERNELS
    (void)preset, (void)dir, (void)formats, (void)tokens;
    throw std::runtime_error("--device " + device + ": this bench_engine was built without the CUDA toolkit");
#else
    require_device(device);
    const int index = anvil::kernels::cuda::parse_device(device);
    const auto info = anvil::kernels::cuda::device_info(index);
    const std::filesystem::path model = dir / preset;
    if (!std::filesystem::exists(model / "config.json")) {
        const auto started = Clock::now();
        // The large model as bf16 (8.7 GB); q8 is made from it at load, as --weights q8 does.
        make_model({model, preset, "llama", preset == "bench" ? "f32" : "bf16", 1, 1});
        std::printf("wrote the %s model in %.0f s\n", preset.c_str(), seconds_since(started));
    }
    const ModelConfig config = load_config(model);
    std::printf("bench_engine --device: %s (%d SMs, %.1f GiB), %s model %d layers x dim %d (ffn %d, vocab %d)\n",
                device.c_str(), info.multiprocessors, double(info.total_memory) / double(size_t(1) << 30), preset.c_str(),
                config.n_layers, config.dim, config.hidden_dim, config.vocab_size);
    std::printf("device    %s\n", info.name.c_str());
    const double copy = device_copy_bandwidth(index);
    std::printf("baseline  device copy bandwidth (read + write) %8.1f GB/s\n", copy / 1e9);
    for (const std::string& name : comma_list(formats)) {
        const WeightFormat format = parse_weight_format(name);
        const auto loading = Clock::now();
        ModelWeights weights(config, model, format, WeightHome::Device);
        std::printf("load      %-6s %.2f GB of weights read in %.1f s\n", name.c_str(), double(weights.bytes_per_token()) / 1e9,
                    seconds_since(loading));
        const DecodeResult d = decode(config, weights, tokens, 16, anvil::kernels::KvType::F32, device);
        const double ceiling = copy / d.bytes_per_token;
        std::printf("decode    %-6s batch 1  %8.1f tok/s  %8.1f MB/token  ceiling %8.1f tok/s  fraction %.2f\n", name.c_str(),
                    d.tokens_per_second, d.bytes_per_token / 1e6, ceiling, d.tokens_per_second / ceiling);
        const double batch = decode_batch(config, weights, 32, tokens, device);
        std::printf("decode    %-6s batch 32 %8.1f tok/s aggregate  (%.1f x batch 1)\n", name.c_str(), batch,
                    batch / d.tokens_per_second);
        const int length = std::min(2048, config.max_position);
        const double p = prefill(config, weights, length, device);
        std::printf("prefill   %-6s %d tokens %8.1f tok/s\n", name.c_str(), length, p);
    }
    return 0;
#endif
}

}  // namespace

int main(int argc, char** argv) {
    anvil::kernels::prefer_passive_openmp_waiting(argv);  // as anvil-engine serves
    spdlog::set_level(spdlog::level::warn);
    int tokens = 32, draft_tokens = 4, depth = 16, rounds = 1;
    std::string keep, formats = "f32,bf16,q8", served = "yes", drafts, kv_dtype = "f32", device = "cpu", preset = "bench";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--draft")) drafts = argv[i + 1];
        else if (!std::strcmp(argv[i], "--draft-tokens")) draft_tokens = std::atoi(argv[i + 1]);
        if (!std::strcmp(argv[i], "--weights")) formats = argv[i + 1];
        else if (!std::strcmp(argv[i], "--served")) served = argv[i + 1];
        else if (!std::strcmp(argv[i], "--threads")) omp_set_num_threads(std::atoi(argv[i + 1]));
        else if (!std::strcmp(argv[i], "--tokens")) tokens = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--keep")) keep = argv[i + 1];
        else if (!std::strcmp(argv[i], "--depth")) depth = std::max(1, std::atoi(argv[i + 1]));
        else if (!std::strcmp(argv[i], "--rounds")) rounds = std::max(1, std::atoi(argv[i + 1]));
        else if (!std::strcmp(argv[i], "--kv-dtype")) kv_dtype = argv[i + 1];
        else if (!std::strcmp(argv[i], "--device")) device = argv[i + 1];
        else if (!std::strcmp(argv[i], "--preset")) preset = argv[i + 1];
    }
    if (device != "cpu") {
        anvil::test::TempDir scratch;
        try {
            return run_on_device(device, preset, keep.empty() ? scratch.path() : std::filesystem::path(keep),
                                               formats == "f32,bf16,q8" ? "bf16,q8" : formats, tokens);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "bench_engine: %s\n", e.what());
            return 1;
        }
    }
    anvil::kernels::KvType kv_type;
    try {
        kv_type = parse_kv_type(kv_dtype);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_engine: %s\n", e.what());
        return 2;
    }
    anvil::test::TempDir scratch;
    if (!drafts.empty()) {
        std::printf("bench_engine --draft: %s kernels, %d threads, load average %s\n",
                    anvil::kernels::isa_name(anvil::kernels::active_isa()).c_str(), omp_get_max_threads(),
                    anvil::bench::load_average().c_str());
        std::printf("cpu       %s\n", anvil::bench::cpu_description().c_str());
        const bool tokens_given = std::any_of(argv + 1, argv + argc, [](const char* a) { return !std::strcmp(a, "--tokens"); });
        const int rc = anvil::bench::draft::run(keep.empty() ? scratch.path() : std::filesystem::path(keep), drafts,
                                                tokens_given ? tokens : 64, draft_tokens);
        std::printf("load average at the end %s\n", anvil::bench::load_average().c_str());
        return rc;
    }
    const std::filesystem::path model = keep.empty() ? scratch / "bench" : std::filesystem::path(keep);
    if (!std::filesystem::exists(model / "config.json")) make_model({model, "bench", "llama", "f32", 1, 1});
    const ModelConfig config = load_config(model);

    std::printf("bench_engine: %s kernels, %d threads, load average %s, bench model %d layers x dim %d (ffn %d, vocab %d)\n",
                anvil::kernels::isa_name(anvil::kernels::active_isa()).c_str(), omp_get_max_threads(),
                anvil::bench::load_average().c_str(), config.n_layers, config.dim, config.hidden_dim, config.vocab_size);
    std::printf("cpu       %s\n", anvil::bench::cpu_description().c_str());
    if (depth + tokens + 1 > config.max_position) {
        std::fprintf(stderr, "bench_engine: --depth %d and --tokens %d pass the model's %d positions\n", depth, tokens,
                     config.max_position);
        return 2;
    }
    std::printf("decode from position %d, %s KV cache\n", depth, kv_dtype.c_str());
    const double bandwidth = anvil::bench::read_bandwidth();
    std::printf("baseline  memory read bandwidth            %8.2f GB/s  (1 GiB buffer)\n", bandwidth / 1e9);

    auto report = [&](const char* name, const ModelConfig& c, const ModelWeights& weights) {
        std::vector<double> fractions;
        DecodeResult d{};
        for (int round = 0; round < rounds; ++round) {
            d = decode(c, weights, tokens, depth, kv_type);
            const double here = anvil::bench::read_bandwidth(size_t(d.bytes_per_token));
            std::printf("baseline  read bandwidth, %6.1f MB buffer %8.2f GB/s\n", d.bytes_per_token / 1e6, here / 1e9);
            const double ceiling = here / d.bytes_per_token;
            std::printf("decode    %-6s batch 1 %7.2f tok/s  %7.1f MB/token  ceiling %7.2f tok/s  fraction %.2f  (cpu share %.2f)\n",
                        name, d.tokens_per_second, d.bytes_per_token / 1e6, ceiling, d.tokens_per_second / ceiling, d.cpu_share);
            fractions.push_back(d.tokens_per_second / ceiling);
        }
        if (rounds > 1) {
            const auto [lowest, highest] = std::minmax_element(fractions.begin(), fractions.end());
            std::printf("decode    %-6s median fraction of %d rounds %.2f  (from %.2f to %.2f)\n", name, rounds,
                        anvil::bench::median(fractions), *lowest, *highest);
        }
        const double p = prefill(c, weights, 512);
        std::printf("prefill   %-6s 512 tokens %7.1f tok/s  (%.1f x decode)\n", name, p, p / d.tokens_per_second);
    };
    for (const std::string& name : comma_list(formats)) {
        if (name == "f32" || name == "bf16" || name == "q8") {
            const WeightFormat format = parse_weight_format(name);
            ModelWeights weights(config, model, format);
            report(weight_format_name(format), config, weights);
            continue;
        }
        const std::filesystem::path file = scratch / ("bench." + name + ".gguf");
        convert_to_gguf(model, file, parse_gguf_type(name));  // throws naming the accepted types
        const ModelConfig gguf_config = load_config(file);
        ModelWeights weights(gguf_config, file, WeightFormat::Stored);
        report(name.c_str(), gguf_config, weights);
        std::filesystem::remove(file);
    }
    for (int clients : {1, 4, 16}) {
        if (served != "yes") break;
        const double t = served_throughput(model, "bf16", clients, tokens);
        std::printf("served    bf16 %2d concurrent  %7.2f tok/s aggregate (HTTP, continuous batching)\n", clients, t);
    }
    std::printf("load average at the end %s\n", anvil::bench::load_average().c_str());
    return 0;
}
