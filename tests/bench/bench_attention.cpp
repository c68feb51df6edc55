// Decode attention at a long context, alone: one token's attention over every layer of a paged,
// head-major KV cache (kernels::attention_heads, as the model runner calls it), with a read of
// the layer's weights between layers so that each layer's cache comes from wherever decode finds
// it, not from L1. Prints the cache's bytes read per second beside two rates measured in the same
// run: the read bandwidth of a buffer the size of the cache read again and again (the ceiling
// bench_engine uses, from L3 where the cache fits there), and the rate at which the weights'
// read between layers streams (the stream: lines no cache level holds, as the KV cache's are).
//
//   bench_attention [--positions N] [--kv-dtype f32|bf16] [--block-size N] [--rounds N]
//
// Shape: the bench model's (12 layers, 4 kv heads of 64, 16 query heads), blocks of 16 positions
// (the engine's default) in a scrambled order as a long-lived server's allocator leaves them; 2048 positions unless told.
// Threads: OMP_NUM_THREADS, sharing each layer's kv heads as the runner's team does.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_bandwidth.hpp"
#include "bench_support.hpp"
#include "kernels/attention.hpp"
#include "kernels/convert.hpp"
#include "kernels/cpu_features.hpp"
#include "kernels/streamed_memory.hpp"
#include "kernels/team.hpp"
#include "kernels/thread_policy.hpp"

using namespace anvil::kernels;
using Clock = std::chrono::steady_clock;

#ifdef ANVIL_AB_BASELINE
namespace anvil::kernels {
void attention_heads_baseline(const float* q, int heads, const PagedKv& kv, int kv_head, const int32_t* block_table, int first,
                              int count, float scale, float* scores, float* out);
}
#endif

namespace {

constexpr int kLayers = 12, kKvHeads = 4, kHeadDim = 64, kHeads = 16;
constexpr size_t kWeightBytes = size_t(80) << 20;  // the bench model's Q4_K_M weights, about

}  // namespace

int main(int argc, char** argv) {
    prefer_passive_openmp_waiting(argv);  // as anvil-engine serves
    int positions = 2048, rounds = 5, block_size = 16;
    std::string dtype = "f32";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--positions")) positions = std::max(1, std::atoi(argv[i + 1]));
        else if (!std::strcmp(argv[i], "--kv-dtype")) dtype = argv[i + 1];
        else if (!std::strcmp(argv[i], "--rounds")) rounds = std::max(1, std::atoi(argv[i + 1]));
        else if (!std::strcmp(argv[i], "--block-size")) block_size = std::max(1, std::atoi(argv[i + 1]));
        else {
            std::fprintf(stderr, "usage: bench_attention [--positions N] [--kv-dtype f32|bf16] [--block-size N] [--rounds N]\n");
            return 2;
        }
    }
    if (dtype != "f32" && dtype != "bf16") {
        std::fprintf(stderr, "bench_attention: --kv-dtype %s: f32 or bf16\n", dtype.c_str());
        return 2;
    }
    const bool bf16 = dtype == "bf16";
    const size_t element = bf16 ? 2 : 4;
    const int blocks = (positions + block_size - 1) / block_size;
    const size_t block_elements = size_t(kKvHeads) * block_size * kHeadDim;
    const size_t layer_bytes = size_t(blocks) * block_elements * element;

    // Keys and values of every layer, random, on huge pages as KvCache holds them.
    const StreamedBuffer keys = allocate_streamed(layer_bytes * kLayers), values = allocate_streamed(layer_bytes * kLayers);
    std::mt19937 random(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const StreamedBuffer* buffer : {&keys, &values}) {
        std::vector<float> x(layer_bytes * kLayers / element);
        for (float& v : x) v = normal(random);
        if (bf16) f32_to_bf16_array(x.data(), reinterpret_cast<uint16_t*>(buffer->get()), x.size());
        else std::memcpy(buffer->get(), x.data(), x.size() * sizeof(float));
    }
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), random);
    std::vector<float> q(size_t(kHeads) * kHeadDim), out(q.size());
    for (float& x : q) x = normal(random);
    const int threads = omp_get_max_threads();
    std::vector<float> scores(size_t(threads) * 4 * size_t(positions));
    const StreamedBuffer weights = allocate_streamed(kWeightBytes);
    std::memset(weights.get(), 1, kWeightBytes);

    std::printf("bench_attention: %d threads, %d positions, %s cache, %d layers x %d kv heads of %d, %d query heads\n", threads,
                positions, dtype.c_str(), kLayers, kKvHeads, kHeadDim, kHeads);
    std::printf("cpu       %s\n", anvil::bench::cpu_description().c_str());
    std::printf("kernels   %s\n", isa_name(active_isa()).c_str());
    const size_t cache_bytes = 2 * layer_bytes * kLayers;
    using Attention = void (*)(const float*, int, const PagedKv&, int, const int32_t*, int, int, float, float*, float*);
#ifdef ANVIL_AB_BASELINE
    // attention_ab.sh: the baseline revision's kernel beside the working tree's, each layer run by
    // both in turns (each after its own read of the weights), so the host's phases move both alike.
    const Attention kernels[2] = {attention_heads_baseline, attention_heads};
    constexpr int kSides = 2;
#else
    const Attention kernels[1] = {attention_heads};
    constexpr int kSides = 1;
#endif
    std::vector<float> outs[2] = {out, out};
    std::vector<double> rates[kSides], fractions, stream_fractions, ratios;
    volatile uint64_t sink = 0;
    // The weights' read and each layer's attention are steps of one team, as in the engine's
    // decode pass (kernels/team.hpp): a region forked a step found its other thread asleep after
    // the read's static halves ended apart, and timed its waking (50-90 us a layer on a VM).
    Team team(threads);
    constexpr size_t kPieces = 1024;  // of the weights, shared as a product's rows are
    struct alignas(64) Sum {
        uint64_t value = 0;
    };
    std::vector<Sum> sums(static_cast<size_t>(threads));
    for (int round = 0; round < rounds; ++round) {
        double seconds[kSides] = {}, stream_seconds = 0;
        run_as_team(team, [&] {
            const bool timer = omp_get_thread_num() == 0;
            for (int token = 0; token < 8; ++token)
                for (int layer = 0; layer < kLayers; ++layer)
                    for (int turn = 0; turn < kSides; ++turn) {
                        const int side = (turn + token + layer) % kSides;  // each goes first as often
                        // The weights the layer's products stream, timed as the stream attention is put beside.
                        const auto streaming = Clock::now();
                        share_items(true, int(kPieces), 1, [&](int piece) {
                            uint64_t sum = 0;
                            const size_t lines = kWeightBytes / 64 / kPieces;
                            for (size_t line = size_t(piece) * lines; line < size_t(piece + 1) * lines; ++line)
                                sum += weights.get()[line * 64];
                            sums[size_t(omp_get_thread_num())].value += sum;
                        });
                        PagedKv kv;
                        kv.type = bf16 ? KvType::BF16 : KvType::F32;
                        kv.keys = keys.get() + layer_bytes * size_t(layer);
                        kv.values = values.get() + layer_bytes * size_t(layer);
                        kv.block_size = block_size;
                        kv.kv_heads = kKvHeads;
                        kv.head_dim = kHeadDim;
                        kv.layout = KvLayout::HeadMajor;
                        const auto start = Clock::now();
                        share_items(true, kKvHeads, 1, [&](int h) {
                            const int group = kHeads / kKvHeads;
                            kernels[side](&q[size_t(h) * group * kHeadDim], group, kv, h, table.data(), 0, positions, 0.125f,
                                          &scores[size_t(omp_get_thread_num()) * 4 * size_t(positions)],
                                          &outs[side][size_t(h) * group * kHeadDim]);
                        });
                        if (timer) {
                            const auto end = Clock::now();
                            stream_seconds += std::chrono::duration<double>(start - streaming).count();
                            seconds[side] += std::chrono::duration<double>(end - start).count();
                        }
                    }
        });
        for (const Sum& sum : sums) sink = sink + sum.value;
        const double ceiling = anvil::bench::read_bandwidth(cache_bytes);
        for (int side = 0; side < kSides; ++side) rates[side].push_back(double(cache_bytes) * 8 / seconds[side]);
        const double rate = rates[kSides - 1].back();
        const double stream = double(kWeightBytes) * 8 * kLayers * kSides / stream_seconds;
        fractions.push_back(rate / ceiling);
        stream_fractions.push_back(rate / stream);
        std::printf("attention %7.2f GB/s of cache read  ceiling %7.2f GB/s (%.0f MB buffer)  fraction %.2f  stream %6.2f GB/s  of stream %.2f",
                    rate / 1e9, ceiling / 1e9, double(cache_bytes) / 1e6, rate / ceiling, stream / 1e9, rate / stream);
        if (kSides == 2) {
            ratios.push_back(seconds[0] / seconds[kSides - 1]);
            std::printf("  baseline %7.2f GB/s  new/baseline %.3f", rates[0].back() / 1e9, ratios.back());
        }
        std::printf("\n");
    }
    std::printf("attention median %.2f GB/s, median fraction %.2f of the ceiling, %.2f of the stream, %d rounds\n",
                anvil::bench::median(rates[kSides - 1]) / 1e9, anvil::bench::median(fractions), anvil::bench::median(stream_fractions), rounds);
    if (kSides == 2) {
        const bool identical = std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * sizeof(float)) == 0;
        std::printf("new/baseline median %.3f (from %.3f to %.3f)  %s\n", anvil::bench::median(ratios), *std::min_element(ratios.begin(), ratios.end()),
                    *std::max_element(ratios.begin(), ratios.end()), identical ? "outputs identical" : "OUTPUTS DIFFER");
        return identical ? 0 : 1;
    }
    return 0;
}
