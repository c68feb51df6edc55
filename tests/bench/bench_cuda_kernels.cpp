// The CUDA kernels against the device's own copy bandwidth: the measured device-to-device copy
// (bytes read + bytes written per second), each matrix product's achieved bandwidth at decode batch
// sizes and its ratio to the copy, and the decode of a synthetic bf16 model of 4.5 GB (Llama-3-8B
// shapes, 8 layers) at batch 1 and 64, as one CUDA graph per step. Weights are filled with a byte
// pattern: the time of these kernels does not depend on the values.
//
// Usage: bench_cuda_kernels [--device cuda:N] [--summary FILE]
// --summary writes "key value" lines for tests/device/run.sh's table. Without a device (or built
// without the toolkit) it says so and exits 0.
#ifndef ANVIL_HAVE_CUDA_KERNELS

#include <cstdio>

int main() {
    std::puts("bench_cuda_kernels: built without the CUDA toolkit; nothing to measure");
    return 0;
}

#else

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/matmul.hpp"
#include "kernels/cuda/ops.hpp"

namespace cuda = anvil::kernels::cuda;
using anvil::kernels::KvType;
using anvil::kernels::WeightMatrix;
using anvil::kernels::WeightType;
using anvil::kernels::kQ8Group;

namespace {

constexpr double kGB = 1e9;

struct Summary {
    std::vector<std::pair<std::string, std::string>> lines;
    void add(const std::string& key, double value) {
        char text[64];
        std::snprintf(text, sizeof text, "%.4g", value);
        lines.emplace_back(key, text);
    }
};

// Device-to-device copy of `bytes`, repeated: read + written bytes per second.
double copy_bandwidth(cuda::Context& context, size_t bytes) {
    cuda::DeviceArray<uint8_t> a(bytes), b(bytes);
    cuda::fill_bytes(context, a.data(), 1, bytes);
    cuda::copy_async(context, b.data(), a.data(), bytes);  // warm-up
    context.synchronize();
    cuda::StreamTimer timer(context);
    const int iterations = 10;
    timer.start();
    for (int i = 0; i < iterations; ++i) cuda::copy_async(context, (i % 2 ? a : b).data(), (i % 2 ? b : a).data(), bytes);
    const double seconds = timer.stop_seconds();
    return 2.0 * double(bytes) * iterations / seconds;
}

// A device matrix filled with a byte pattern (bf16 0x3c3c is about 0.0115; q8 0x3c is 60 with
// scales of about 0.0115).
struct PatternWeights {
    cuda::DeviceArray<uint8_t> data;
    cuda::DeviceArray<float> scales;
    WeightMatrix view;

    PatternWeights(cuda::Context& context, WeightType type, int rows, int cols) {
        const size_t count = size_t(rows) * cols;
        const size_t element = type == WeightType::F32 ? 4 : type == WeightType::BF16 ? 2 : 1;
        data = cuda::DeviceArray<uint8_t>(count * element);
        cuda::fill_bytes(context, data.data(), 0x3c, data.bytes());
        view = {type, rows, cols, data.data(), nullptr};
        if (type == WeightType::Q8) {
            scales = cuda::DeviceArray<float>(count / kQ8Group);
            cuda::fill_bytes(context, scales.data(), 0x3c, scales.bytes());
            view.scales = scales.data();
        }
    }
    size_t bytes() const { return data.bytes() + scales.bytes(); }
};

// One product shape at several batch sizes; copies of the matrix rotate so that the measured
// bandwidth is the memory's, not the 50 MB L2 cache's.
void bench_matmul(cuda::Context& context, double copy, WeightType type, const char* name, int rows, int cols,
                  Summary& summary) {
    const size_t element = type == WeightType::F32 ? 4 : type == WeightType::BF16 ? 2 : 1;
    const size_t one = size_t(rows) * cols * element + (type == WeightType::Q8 ? size_t(rows) * cols / kQ8Group * 4 : 0);
    const int copies = int(std::max<size_t>(2, (size_t(512) << 20) / one + 1));
    std::vector<std::unique_ptr<PatternWeights>> matrices;
    for (int i = 0; i < copies; ++i) matrices.push_back(std::make_unique<PatternWeights>(context, type, rows, cols));
    const int max_tokens = 64;
    cuda::DeviceArray<float> x(size_t(max_tokens) * cols), y(size_t(max_tokens) * rows);
    cuda::fill_bytes(context, x.data(), 0x3c, x.bytes());
    // Both paths where both apply, to see where cuBLAS starts to win (kCublasFromTokens).
    for (int tokens : {1, 8, 16, 64}) {
        for (cuda::MatmulPath path : {cuda::MatmulPath::Own, cuda::MatmulPath::Cublas}) {
            if (path == cuda::MatmulPath::Cublas && (type == WeightType::Q8 || tokens == 1)) continue;
            for (int i = 0; i < copies; ++i)
                cuda::matmul(context, matrices[size_t(i)]->view, x.data(), tokens, y.data(), path);
            context.synchronize();
            const int iterations = std::max(40, 2 * copies);
            cuda::StreamTimer timer(context);
            timer.start();
            for (int i = 0; i < iterations; ++i)
                cuda::matmul(context, matrices[size_t(i % copies)]->view, x.data(), tokens, y.data(), path);
            const double seconds = timer.stop_seconds() / iterations;
            const double bytes = double(one) + 4.0 * tokens * (double(cols) + rows);
            const double bandwidth = bytes / seconds;
            std::printf("  %-5s %-8s [%6d x %5d] x%-3d %-6s %8.1f us  %7.1f GB/s  %5.1f%% of copy  %8.2f TFLOP/s\n",
                        anvil::kernels::weight_type_name(type), name, rows, cols, tokens,
                        path == cuda::MatmulPath::Own ? "own" : "cublas", seconds * 1e6, bandwidth / kGB,
                        100.0 * bandwidth / copy, 2.0 * rows * cols * tokens / seconds / 1e12);
            if (tokens == 1)
                summary.add(std::string("matvec_") + anvil::kernels::weight_type_name(type) + "_" + name + "_pct_copy",
                            100.0 * bandwidth / copy);
        }
    }
}

// Paged attention alone: Llama-3-8B's heads (32 query, 8 KV, head_dim 128), a bf16 cache, every
// sequence at position context - 1. Bytes: the keys and values each sequence reads once (the query
// heads of a group read the same ones again, from L2).
void bench_attention(cuda::Context& context, double copy, int batch, int context_length, Summary& summary) {
    const int heads = 32, kv_heads = 8, head_dim = 128, block_size = 16, kv_dim = kv_heads * head_dim;
    const int max_blocks = (context_length + block_size - 1) / block_size;
    const size_t blocks = size_t(batch) * max_blocks;
    cuda::DeviceArray<uint16_t> keys(blocks * block_size * kv_dim), values(blocks * block_size * kv_dim);
    cuda::fill_bytes(context, keys.data(), 0x3c, keys.bytes());
    cuda::fill_bytes(context, values.data(), 0x3c, values.bytes());
    cuda::DeviceArray<float> q(size_t(batch) * heads * head_dim), out(size_t(batch) * heads * head_dim);
    cuda::fill_bytes(context, q.data(), 0x3c, q.bytes());
    std::vector<int32_t> positions(static_cast<size_t>(batch), context_length - 1), sequence(static_cast<size_t>(batch)),
        tables(blocks);
    for (int s = 0; s < batch; ++s) sequence[size_t(s)] = s;
    for (size_t b = 0; b < blocks; ++b) tables[b] = int32_t(b);
    const cuda::DeviceArray<int32_t> dpositions(positions), dsequence(sequence), dtables(tables);
    const cuda::KvBatch kv_batch{dpositions.data(), dsequence.data(), dtables.data(), max_blocks};
    const anvil::kernels::PagedKv kv{KvType::BF16, keys.data(), values.data(), block_size, kv_heads, head_dim};
    const float scale = 1.0f / std::sqrt(float(head_dim));
    cuda::attention(context, q.data(), kv, batch, heads, kv_batch, 0, scale, out.data());
    context.synchronize();
    const int iterations = 20;
    cuda::StreamTimer timer(context);
    timer.start();
    for (int i = 0; i < iterations; ++i) cuda::attention(context, q.data(), kv, batch, heads, kv_batch, 0, scale, out.data());
    const double seconds = timer.stop_seconds() / iterations;
    const double bytes = 2.0 * batch * context_length * kv_dim * 2;
    std::printf("  attention batch %2d, context %5d: %8.1f us  %7.1f GB/s  %5.1f%% of copy\n", batch, context_length,
                seconds * 1e6, bytes / seconds / kGB, 100.0 * bytes / seconds / copy);
    summary.add("attention_b" + std::to_string(batch) + "_ctx" + std::to_string(context_length) + "_pct_copy",
                100.0 * bytes / seconds / copy);
}

// A synthetic bf16 model with Llama-3-8B's shapes and `layers` layers, its KV cache, and one decode
// step for `batch` sequences each at position `context_length - 1`.
struct SyntheticModel {
    static constexpr int dim = 4096, hidden = 14336, heads = 32, kv_heads = 8, head_dim = 128, vocab = 128256;
    static constexpr int block_size = 16;
    int layers, batch, context_length, max_blocks;

    struct Layer {
        std::unique_ptr<PatternWeights> wq, wk, wv, wo, gate, up, down;
        cuda::DeviceArray<float> attn_norm, ffn_norm;
        cuda::DeviceArray<uint16_t> keys, values;  // [blocks][block_size][kv_heads][head_dim] bf16
    };
    std::vector<Layer> stack;
    std::unique_ptr<PatternWeights> embedding, lm_head;
    cuda::DeviceArray<float> final_norm, rope_cos, rope_sin;
    cuda::DeviceArray<float> x, xb, q, k, v, att, hb, hb2, logits;
    cuda::DeviceArray<int32_t> tokens, positions, sequence, tables, next;
    size_t weight_bytes_per_step = 0, kv_bytes_per_step = 0;

    SyntheticModel(cuda::Context& context, int layers_, int batch_, int context_length_)
        : layers(layers_), batch(batch_), context_length(context_length_),
          max_blocks((context_length_ + block_size - 1) / block_size) {
        const int kv_dim = kv_heads * head_dim;
        const size_t blocks = size_t(batch) * max_blocks;
        for (int l = 0; l < layers; ++l) {
            Layer layer;
            layer.wq = std::make_unique<PatternWeights>(context, WeightType::BF16, dim, dim);
            layer.wk = std::make_unique<PatternWeights>(context, WeightType::BF16, kv_dim, dim);
            layer.wv = std::make_unique<PatternWeights>(context, WeightType::BF16, kv_dim, dim);
            layer.wo = std::make_unique<PatternWeights>(context, WeightType::BF16, dim, dim);
            layer.gate = std::make_unique<PatternWeights>(context, WeightType::BF16, hidden, dim);
            layer.up = std::make_unique<PatternWeights>(context, WeightType::BF16, hidden, dim);
            layer.down = std::make_unique<PatternWeights>(context, WeightType::BF16, dim, hidden);
            layer.attn_norm = filled<float>(context, dim);
            layer.ffn_norm = filled<float>(context, dim);
            layer.keys = filled<uint16_t>(context, blocks * block_size * kv_dim);
            layer.values = filled<uint16_t>(context, blocks * block_size * kv_dim);
            for (const auto* w : {&layer.wq, &layer.wk, &layer.wv, &layer.wo, &layer.gate, &layer.up, &layer.down})
                weight_bytes_per_step += (*w)->bytes();
            weight_bytes_per_step += 2 * size_t(dim) * 4;
            stack.push_back(std::move(layer));
        }
        embedding = std::make_unique<PatternWeights>(context, WeightType::BF16, vocab, dim);
        lm_head = std::make_unique<PatternWeights>(context, WeightType::BF16, vocab, dim);
        weight_bytes_per_step += lm_head->bytes() + size_t(dim) * 4;
        final_norm = filled<float>(context, dim);
        // cos 0.0115.., sin 0.0115..: the values do not matter for the time.
        rope_cos = filled<float>(context, size_t(context_length) * head_dim / 2);
        rope_sin = filled<float>(context, size_t(context_length) * head_dim / 2);
        x = cuda::DeviceArray<float>(size_t(batch) * dim);
        xb = cuda::DeviceArray<float>(size_t(batch) * dim);
        q = cuda::DeviceArray<float>(size_t(batch) * heads * head_dim);
        k = cuda::DeviceArray<float>(size_t(batch) * kv_dim);
        v = cuda::DeviceArray<float>(size_t(batch) * kv_dim);
        att = cuda::DeviceArray<float>(size_t(batch) * heads * head_dim);
        hb = cuda::DeviceArray<float>(size_t(batch) * hidden);
        hb2 = cuda::DeviceArray<float>(size_t(batch) * hidden);
        logits = cuda::DeviceArray<float>(size_t(batch) * vocab);
        std::vector<int32_t> host_tokens(static_cast<size_t>(batch)), host_positions(static_cast<size_t>(batch)), host_sequence(static_cast<size_t>(batch)),
            host_tables(blocks);
        for (int s = 0; s < batch; ++s) {
            host_tokens[size_t(s)] = (s * 7919) % vocab;
            host_positions[size_t(s)] = context_length - 1;
            host_sequence[size_t(s)] = s;
        }
        for (size_t b = 0; b < blocks; ++b) host_tables[b] = int32_t(b);
        tokens = cuda::DeviceArray<int32_t>(host_tokens);
        positions = cuda::DeviceArray<int32_t>(host_positions);
        sequence = cuda::DeviceArray<int32_t>(host_sequence);
        tables = cuda::DeviceArray<int32_t>(host_tables);
        next = cuda::DeviceArray<int32_t>(size_t(batch));
        // Per token: every sequence reads its own context's keys and values in every layer.
        kv_bytes_per_step = size_t(layers) * 2 * size_t(context_length) * kv_dim * 2 * size_t(batch);
        // The cuBLAS path's bf16 copy of the widest activations, reserved before any capture.
        context.reserve_scratch(size_t(batch) * hidden * sizeof(uint16_t));
    }

    template <typename T>
    static cuda::DeviceArray<T> filled(cuda::Context& context, size_t n) {
        cuda::DeviceArray<T> array(n);
        cuda::fill_bytes(context, array.data(), 0x3c, array.bytes());
        return array;
    }

    // The engine's forward pass for one decode token of each sequence, on the device.
    void step(cuda::Context& context) {
        const int kv_dim = kv_heads * head_dim, q_dim = heads * head_dim;
        const cuda::KvBatch kv_batch{positions.data(), sequence.data(), tables.data(), max_blocks};
        const float scale = 1.0f / std::sqrt(float(head_dim));
        cuda::embedding(context, embedding->view, tokens.data(), batch, x.data());
        for (Layer& layer : stack) {
            cuda::rmsnorm(context, xb.data(), x.data(), layer.attn_norm.data(), batch, dim, 1e-5f);
            cuda::matmul(context, layer.wq->view, xb.data(), batch, q.data());
            cuda::matmul(context, layer.wk->view, xb.data(), batch, k.data());
            cuda::matmul(context, layer.wv->view, xb.data(), batch, v.data());
            cuda::rope(context, q.data(), batch, q_dim, heads, head_dim, positions.data(), rope_cos.data(), rope_sin.data());
            cuda::rope(context, k.data(), batch, kv_dim, kv_heads, head_dim, positions.data(), rope_cos.data(),
                       rope_sin.data());
            const anvil::kernels::PagedKv kv{KvType::BF16, layer.keys.data(), layer.values.data(), block_size, kv_heads,
                                             head_dim};
            cuda::kv_write(context, kv, layer.keys.data(), layer.values.data(), k.data(), v.data(), batch, kv_batch);
            cuda::attention(context, q.data(), kv, batch, heads, kv_batch, 0, scale, att.data());
            cuda::matmul(context, layer.wo->view, att.data(), batch, xb.data());
            cuda::add(context, x.data(), xb.data(), size_t(batch) * dim);
            cuda::rmsnorm(context, xb.data(), x.data(), layer.ffn_norm.data(), batch, dim, 1e-5f);
            cuda::matmul(context, layer.gate->view, xb.data(), batch, hb.data());
            cuda::matmul(context, layer.up->view, xb.data(), batch, hb2.data());
            cuda::silu_mul(context, hb.data(), hb2.data(), size_t(batch) * hidden);
            cuda::matmul(context, layer.down->view, hb.data(), batch, xb.data());
            cuda::add(context, x.data(), xb.data(), size_t(batch) * dim);
        }
        cuda::rmsnorm(context, xb.data(), x.data(), final_norm.data(), batch, dim, 1e-5f);
        cuda::matmul(context, lm_head->view, xb.data(), batch, logits.data());
        cuda::argmax(context, logits.data(), batch, vocab, next.data());
    }
};

struct DecodeResult {
    double seconds_per_step = 0;  // with a graph
    double seconds_per_step_launched = 0;  // each kernel launched from the host
    bool graph = true;
};

DecodeResult bench_decode(cuda::Context& context, SyntheticModel& model) {
    DecodeResult result;
    model.step(context);  // warm-up (cuBLAS picks its kernels)
    context.synchronize();
    const int steps = 20;
    cuda::StreamTimer timer(context);
    timer.start();
    for (int i = 0; i < steps; ++i) model.step(context);
    result.seconds_per_step_launched = timer.stop_seconds() / steps;
    try {
        cuda::Graph graph(context, [&] { model.step(context); });
        graph.launch();
        context.synchronize();
        timer.start();
        for (int i = 0; i < steps; ++i) graph.launch();
        result.seconds_per_step = timer.stop_seconds() / steps;
    } catch (const cuda::CudaError& error) {
        std::printf("  CUDA graph failed (%s): timing the launched steps instead\n", error.what());
        result.seconds_per_step = result.seconds_per_step_launched;
        result.graph = false;
    }
    return result;
}

}  // namespace

int main(int argc, char** argv) {
    std::string device_name = "cuda:0", summary_path;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--device" && i + 1 < argc) {
            device_name = argv[++i];
        } else if (arg == "--summary" && i + 1 < argc) {
            summary_path = argv[++i];
        } else {
            std::fprintf(stderr, "usage: bench_cuda_kernels [--device cuda:N] [--summary FILE]\n");
            return 2;
        }
    }
    Summary summary;
    const auto write_summary = [&] {
        if (summary_path.empty()) return;
        std::ofstream out(summary_path);
        for (const auto& [key, value] : summary.lines) out << key << ' ' << value << '\n';
    };
    try {
        const int device = cuda::parse_device(device_name);
        const cuda::DeviceProbe probe = cuda::probe_devices();
        if (probe.count == 0) {
            std::printf("bench_cuda_kernels: %s; nothing to measure\n", probe.reason.c_str());
            summary.lines.emplace_back("device", "none");
            write_summary();
            return 0;
        }
        cuda::Context context(device);
        const cuda::DeviceInfo info = cuda::device_info(device);
        std::printf("device %s: %s, sm_%d%d, %d SMs, %.1f GB\n", device_name.c_str(), info.name.c_str(),
                    info.compute_major, info.compute_minor, info.multiprocessors, double(info.total_memory) / kGB);
        std::string name = info.name;
        std::replace(name.begin(), name.end(), ' ', '_');
        summary.lines.emplace_back("device", name);

        const double copy = copy_bandwidth(context, size_t(1) << 30);
        std::printf("device-to-device copy of 1 GiB: %.1f GB/s (bytes read + written)\n", copy / kGB);
        summary.add("copy_gbps", copy / kGB);

        std::printf("matrix products (bytes: weights + activations; %% of the copy bandwidth):\n");
        struct Shape {
            const char* name;
            int rows, cols;
        };
        const Shape shapes[] = {{"wq", 4096, 4096}, {"wk", 1024, 4096}, {"gate", 14336, 4096},
                                {"down", 4096, 14336}, {"lm_head", 128256, 4096}};
        for (WeightType type : {WeightType::BF16, WeightType::Q8})
            for (const Shape& shape : shapes) bench_matmul(context, copy, type, shape.name, shape.rows, shape.cols, summary);

        std::printf("paged attention (32 query heads, 8 KV heads, head_dim 128, bf16 cache):\n");
        for (int batch : {1, 64})
            for (int context_length : {1024, 8192}) bench_attention(context, copy, batch, context_length, summary);

        std::printf("decode, synthetic bf16 model (Llama-3-8B shapes, 8 layers), context 1024, one CUDA graph a step:\n");
        double batch1_tokens = 0;
        for (int batch : {1, 64}) {
            SyntheticModel model(context, 8, batch, 1024);
            const DecodeResult result = bench_decode(context, model);
            const double tokens_per_second = batch / result.seconds_per_step;
            const double bytes = double(model.weight_bytes_per_step + model.kv_bytes_per_step);
            const double bandwidth = bytes / result.seconds_per_step;
            std::printf("  batch %2d: %7.3f ms/step (%7.3f ms launched one by one), %8.1f tokens/s, weights %.2f GB + "
                        "KV %.3f GB read a step: %7.1f GB/s, %5.1f%% of copy\n",
                        batch, result.seconds_per_step * 1e3, result.seconds_per_step_launched * 1e3,
                        tokens_per_second, double(model.weight_bytes_per_step) / kGB,
                        double(model.kv_bytes_per_step) / kGB, bandwidth / kGB, 100.0 * bandwidth / copy);
            summary.add("decode_b" + std::to_string(batch) + "_tokens_per_s", tokens_per_second);
            summary.add("decode_b" + std::to_string(batch) + "_pct_copy", 100.0 * bandwidth / copy);
            if (batch == 1) batch1_tokens = tokens_per_second;
            else summary.add("decode_b64_over_b1", tokens_per_second / batch1_tokens);
        }
        write_summary();
        return 0;
    } catch (const std::exception& error) {
        std::fprintf(stderr, "bench_cuda_kernels: %s\n", error.what());
        summary.lines.emplace_back("error", "see_log");
        write_summary();
        return 1;
    }
}

#endif  // ANVIL_HAVE_CUDA_KERNELS
