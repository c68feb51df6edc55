// The CUDA kernels (kernels/cuda) against the CPU path on random inputs: the same weight bytes, the
// same tables, the same rounding rules. Where both sides round differently, the tolerance is a
// stated bound on float rounding (u = 2^-24, the unit roundoff of f32), never a guess: an indexing
// or layout mistake is off by the size of the values themselves, orders of magnitude above it.
// Without a CUDA device every case that needs one warns "no CUDA device: ... skipped" and passes;
// tests/device/run.sh runs them on a machine that has one.
#ifdef ANVIL_HAVE_CUDA_KERNELS

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/attention.hpp"
#include "kernels/convert.hpp"
#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/matmul.hpp"
#include "kernels/cuda/ops.hpp"
#include "kernels/ops.hpp"
#include "kernels/weight_matrix.hpp"
#include "kernel_matrices.hpp"

namespace cuda = anvil::kernels::cuda;
using anvil::kernels::KvType;
using anvil::kernels::WeightMatrix;
using anvil::kernels::WeightType;
using anvil::kernels::kQ8Group;
using anvil::test::make_matrix;
using anvil::test::random_vector;
using anvil::test::TestMatrix;

namespace {

constexpr double kU = 1.0 / (1 << 24);  // f32 unit roundoff

// A context on cuda:0, or null after saying why the case is skipped.
std::unique_ptr<cuda::Context> device_or_skip() {
    const cuda::DeviceProbe probe = cuda::probe_devices();
    if (probe.count == 0) {
        WARN(probe.reason << "; skipped");
        return nullptr;
    }
    return std::make_unique<cuda::Context>(0);
}


// "cuda-error <check> <worst error / its bound>" on stdout: tests/device/run.sh tabulates the
// largest of each check (1 is the bound; a bitwise comparison reports its count of differences).
void report(const std::string& check, double worst) { std::printf("cuda-error %s %.3g\n", check.c_str(), worst); }

template <typename T>
std::vector<T> download(const cuda::DeviceArray<T>& array) {
    return array.to_host();
}

}  // namespace

TEST_CASE("cuda devices are named cuda or cuda:N, and a missing device is said plainly", "[cuda]") {
    CHECK(cuda::parse_device("cuda") == 0);
    CHECK(cuda::parse_device("cuda:0") == 0);
    CHECK(cuda::parse_device("cuda:7") == 7);
    for (const char* bad : {"", "cuda:", "cuda:-1", "cuda:1x", "cuda:+1", "gpu:0", "CUDA:0", "cuda:99999", "cpu"}) {
        INFO(bad);
        CHECK_THROWS_AS(cuda::parse_device(bad), std::invalid_argument);
    }
    const cuda::DeviceProbe probe = cuda::probe_devices();
    if (probe.count == 0) {
        CHECK(probe.reason.rfind("no CUDA device", 0) == 0);
        CHECK_THROWS_WITH(cuda::Context(0), Catch::Contains("no CUDA device"));
        WARN(probe.reason << "; the device cases are skipped");
    } else {
        CHECK(probe.reason.empty());
        CHECK_THROWS_WITH(cuda::Context(probe.count), Catch::Contains("cuda:" + std::to_string(probe.count)));
        const cuda::DeviceInfo info = cuda::device_info(0);
        CHECK(!info.name.empty());
        CHECK(info.multiprocessors > 0);
    }
}

TEST_CASE("cuda matmul matches the double-precision reference for every format, path and batch size", "[cuda]") {
    auto context = device_or_skip();
    if (!context) return;
    struct Shape {
        int rows, cols;
    };
    // Odd row counts leave blocks part-full; cols not a multiple of 32 loads leaves lanes idle.
    const std::vector<Shape> shapes = {{1, 32}, {37, 96}, {256, 1024}, {515, 2080}, {64, 4096}};
    for (WeightType type : {WeightType::F32, WeightType::BF16, WeightType::Q8}) {
        for (const Shape& shape : shapes) {
            const TestMatrix m = make_matrix(type, shape.rows, shape.cols, uint32_t(shape.rows * 131 + shape.cols));
            const cuda::DeviceWeights w(m.view);
            for (int tokens : {1, 2, 3, 5, 8, 13, 64}) {
                const auto x = random_vector(size_t(tokens) * shape.cols, uint32_t(tokens * 7 + shape.cols));
                const cuda::DeviceArray<float> dx(x);
                for (cuda::MatmulPath path : {cuda::MatmulPath::Own, cuda::MatmulPath::Cublas, cuda::MatmulPath::Auto}) {
                    if (path == cuda::MatmulPath::Cublas && type == WeightType::Q8) continue;
                    INFO(anvil::kernels::weight_type_name(type) << " " << shape.rows << "x" << shape.cols << ", "
                                                               << tokens << " tokens, path " << int(path));
                    cuda::DeviceArray<float> dy(size_t(tokens) * shape.rows);
                    cuda::fill_bytes(*context, dy.data(), 0xff, dy.bytes());  // NaN where nothing is written
                    cuda::matmul(*context, w.view(), dx.data(), tokens, dy.data(), path);
                    context->synchronize();
                    const auto y = download(dy);
                    const bool cublas = path == cuda::MatmulPath::Cublas ||
                                        (path == cuda::MatmulPath::Auto && type != WeightType::Q8 &&
                                         tokens >= cuda::kCublasFromTokens);
                    // Our kernel: each lane sums its 16-byte chunks (e terms each) in order, then
                    // a 5-level warp tree: a summation of depth e + chunks/32 + 5, plus the q8
                    // scale product; rounding error at most depth * u * sum |w x|. cuBLAS: its
                    // order is its own, so the any-order bound cols * u, doubled for tensor cores
                    // that truncate; bf16 weights take x rounded to bf16 (2^-8 relative: 8 significant bits).
                    const int e = type == WeightType::F32 ? 4 : type == WeightType::BF16 ? 8 : 16;
                    const double relative =
                        cublas ? (type == WeightType::BF16 ? 1.0 / 256 : 0.0) + 2.0 * shape.cols * kU
                               : (e + shape.cols / (32.0 * e) + 5 + 3) * kU * 1.01;
                    double worst = 0;
                    for (int t = 0; t < tokens; ++t)
                        for (int r = 0; r < shape.rows; ++r) {
                            double exact = 0, magnitude = 0;
                            for (int k = 0; k < shape.cols; ++k) {
                                const double p = m.exact[size_t(r) * shape.cols + k] * x[size_t(t) * shape.cols + k];
                                exact += p;
                                magnitude += std::fabs(p);
                            }
                            const double got = y[size_t(t) * shape.rows + r];
                            const double error = std::isfinite(got) ? std::fabs(got - exact) : INFINITY;
                            worst = std::max(worst, error / (relative * magnitude + 1e-30));
                        }
                    report(std::string("matmul_") + anvil::kernels::weight_type_name(type) +
                               (cublas ? "_cublas" : "_own"), worst);
                    CHECK(worst <= 1.0);
                }
            }
        }
    }
}

TEST_CASE("cuda matmul refuses shapes and pointers its loads cannot take", "[cuda]") {
    auto context = device_or_skip();
    if (!context) return;
    const TestMatrix m = make_matrix(WeightType::BF16, 4, 12, 1);  // 12 is not a multiple of 8
    const cuda::DeviceWeights w(m.view);
    cuda::DeviceArray<float> x(64), y(64);
    CHECK_THROWS_AS(cuda::matmul(*context, w.view(), x.data(), 1, y.data()), std::invalid_argument);
    const TestMatrix q = make_matrix(WeightType::Q8, 4, 64, 2);
    const cuda::DeviceWeights wq(q.view);
    CHECK_THROWS_AS(cuda::matmul(*context, wq.view(), x.data(), 1, y.data(), cuda::MatmulPath::Cublas),
                    std::invalid_argument);
    CHECK_THROWS_AS(cuda::matmul(*context, wq.view(), x.data() + 1, 1, y.data()), std::invalid_argument);
}

TEST_CASE("cuda f32 to bf16 gives the CPU's bits: nearest even, NaN kept, subnormals flushed", "[cuda]") {
    auto context = device_or_skip();
    if (!context) return;
    std::vector<float> in = random_vector(100000, 5, 1e4f);
    const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                                 0x00000001u, 0x807fffffu, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu,
                                 0x00800000u, 0x3f7fffffu};
    for (uint32_t bits : specials) {
        float f;
        std::memcpy(&f, &bits, sizeof f);
        in.push_back(f);
    }
    const cuda::DeviceArray<float> din(in);
    cuda::DeviceArray<uint16_t> dout(in.size());
    cuda::f32_to_bf16(*context, din.data(), dout.data(), in.size());
    context->synchronize();
    const auto out = download(dout);
    size_t differing = 0;
    for (size_t i = 0; i < in.size(); ++i) differing += out[i] != anvil::kernels::f32_to_bf16(in[i]);
    report("f32_to_bf16_bits_differing", double(differing));
    CHECK(differing == 0);
}

TEST_CASE("cuda rmsnorm matches the double-precision definition, in place and per head", "[cuda]") {
    auto context = device_or_skip();
    if (!context) return;
    for (int n : {1, 64, 128, 1000, 4096, 8192}) {
        const int rows = 7;
        const auto x = random_vector(size_t(rows) * n, uint32_t(n), 3.0f);
        const auto weight = random_vector(size_t(n), uint32_t(n + 1));
        const cuda::DeviceArray<float> dweight(weight);
        cuda::DeviceArray<float> dx(x), dout(x.size());
        cuda::rmsnorm(*context, dout.data(), dx.data(), dweight.data(), rows, n, 1e-5f);
        cuda::rmsnorm(*context, dx.data(), dx.data(), dweight.data(), rows, n, 1e-5f);  // in place
        context->synchronize();
        const auto out = download(dout), in_place = download(dx);
        // Sum of squares: positive terms, depth n/256 + 10 (strided thread sums, two warp trees);
        // then mean, sqrt, divide and two products: each one rounding.
        const double relative = (n / 256.0 + 10 + 6) * kU;
        std::vector<float> cpu(static_cast<size_t>(n));
        double worst = 0, worst_cpu = 0;
        for (int r = 0; r < rows; ++r) {
            const float* row = &x[size_t(r) * n];
            double mean_square = 0;
            for (int i = 0; i < n; ++i) mean_square += double(row[i]) * row[i];
            mean_square /= n;
            const double inverse = 1.0 / std::sqrt(mean_square + 1e-5);
            anvil::kernels::rmsnorm(cpu.data(), row, weight.data(), n, 1e-5f);
            for (int i = 0; i < n; ++i) {
                const double exact = row[i] * inverse * weight[size_t(i)];
                const double bound = relative * std::fabs(exact) + 1e-37;
                worst = std::max(worst, std::fabs(out[size_t(r) * n + i] - exact) / bound);
                CHECK(in_place[size_t(r) * n + i] == out[size_t(r) * n + i]);
                // The CPU kernel's own depth is n (its tail loop), so the two may differ by both bounds.
                worst_cpu = std::max(worst_cpu, std::fabs(double(out[size_t(r) * n + i]) - cpu[size_t(i)]) /
                                                    (bound + (n + 6) * kU * std::fabs(exact)));
            }
        }
        INFO("n " << n);
        report("rmsnorm", worst);
        report("rmsnorm_vs_cpu_kernel", worst_cpu);
        CHECK(worst <= 1.0);
        CHECK(worst_cpu <= 1.0);
    }
}

TEST_CASE("cuda rope rotates like the CPU kernel with the engine's tables, at each token's position", "[cuda]") {
    auto context = device_or_skip();
    if (!context) return;
    for (double theta : {10000.0, 1000000.0}) {
        for (int hd : {64, 128, 80}) {
            const int heads = 6, tokens = 9, max_context = 4096, half = hd / 2;
            const int stride = heads * hd + 32;  // rows wider than the heads: the rest is untouched
            // The tables as engine/model_runner builds them from rope_inverse_frequencies.
            std::vector<float> cos(size_t(max_context) * half), sin(cos.size());
            for (int p = 0; p < max_context; ++p)
                for (int i = 0; i < half; ++i) {
                    const double angle = double(p) / std::pow(theta, double(2 * i) / hd);
                    cos[size_t(p) * half + i] = float(std::cos(angle));
                    sin[size_t(p) * half + i] = float(std::sin(angle));
                }
            std::vector<int32_t> positions = {0, 1, 2, 17, 511, 512, 2047, 4095, 3000};
            const auto vec = random_vector(size_t(tokens) * stride, uint32_t(hd), 2.0f);
            cuda::DeviceArray<float> dvec(vec);
            const cuda::DeviceArray<float> dcos(cos), dsin(sin);
            const cuda::DeviceArray<int32_t> dpositions(positions);
            cuda::rope(*context, dvec.data(), tokens, stride, heads, hd, dpositions.data(), dcos.data(), dsin.data());
            context->synchronize();
            const auto got = download(dvec);
            auto expected = vec;
            double worst = 0;
            for (int t = 0; t < tokens; ++t) {
                float* row = &expected[size_t(t) * stride];
                const size_t p = size_t(positions[size_t(t)]);
                anvil::kernels::rope(row, heads, hd, &cos[p * half], &sin[p * half]);
                for (int j = 0; j < stride; ++j) {
                    const size_t at = size_t(t) * stride + j;
                    if (j >= heads * hd) {
                        CHECK(got[at] == vec[at]);
                        continue;
                    }
                    // Both round each product and the sum; a compiler that fuses one product into
                    // the sum on the CPU side moves the result by at most u of each product.
                    const int i = (j % hd) % half;
                    const float a = vec[size_t(t) * stride + (j / hd) * hd + i];
                    const float b = vec[size_t(t) * stride + (j / hd) * hd + i + half];
                    const double bound =
                        2 * kU * (std::fabs(a * cos[p * half + i]) + std::fabs(b * sin[p * half + i])) + 1e-37;
                    worst = std::max(worst, std::fabs(double(got[at]) - expected[at]) / bound);
                }
            }
            INFO("theta " << theta << ", head_dim " << hd);
            report("rope", worst);
            CHECK(worst <= 1.0);
        }
    }
}

TEST_CASE("cuda silu_mul, add, add_bias and embedding match the CPU operations", "[cuda]") {
    auto context = device_or_skip();
    if (!context) return;
    const size_t n = 100003;
    const auto gate = random_vector(n, 21, 12.0f), up = random_vector(n, 22, 3.0f);
    cuda::DeviceArray<float> dgate(gate);
    const cuda::DeviceArray<float> dup(up);
    cuda::silu_mul(*context, dgate.data(), dup.data(), n);
    context->synchronize();
    auto expected = gate;
    anvil::kernels::silu_mul(expected.data(), up.data(), int(n));
    const auto got = download(dgate);
    // exp within 2 ulp (4 u) on the device and 1 ulp (2 u) on the CPU, then 1 + e, divide and
    // product (u each): 12 u apart at first order, 16 u with room for the second.
    double worst = 0;
    for (size_t i = 0; i < n; ++i)
        worst = std::max(worst, std::fabs(double(got[i]) - expected[i]) / (16 * kU * std::fabs(expected[i]) + 1e-37));
    report("silu_mul", worst);
    CHECK(worst <= 1.0);

    // add and add_bias: one rounding each, the same on both sides.
    const auto x = random_vector(n, 23), y = random_vector(n, 24);
    cuda::DeviceArray<float> dx(x);
    const cuda::DeviceArray<float> dy(y);
    cuda::add(*context, dx.data(), dy.data(), n);
    const int rows = 13, dim = 1000;
    const auto bias = random_vector(size_t(dim), 25);
    const cuda::DeviceArray<float> dbias(bias);
    cuda::DeviceArray<float> dz(std::vector<float>(x.begin(), x.begin() + rows * dim));
    cuda::add_bias(*context, dz.data(), dbias.data(), rows, dim);
    context->synchronize();
    auto sum = x;
    anvil::kernels::add(sum.data(), y.data(), int(n));
    CHECK(download(dx) == sum);
    std::vector<float> biased(x.begin(), x.begin() + rows * dim);
    for (int r = 0; r < rows; ++r) anvil::kernels::add(&biased[size_t(r) * dim], bias.data(), dim);
    CHECK(download(dz) == biased);

    // The embedding: dequantize_row's values exactly, for each format, repeated tokens included.
    const std::vector<int32_t> tokens = {0, 5, 999, 5, 512, 1};
    const cuda::DeviceArray<int32_t> dtokens(tokens);
    for (WeightType type : {WeightType::F32, WeightType::BF16, WeightType::Q8}) {
        const TestMatrix table = make_matrix(type, 1000, 96, 26);
        const cuda::DeviceWeights dtable(table.view);
        cuda::DeviceArray<float> dout(tokens.size() * 96);
        cuda::embedding(*context, dtable.view(), dtokens.data(), int(tokens.size()), dout.data());
        context->synchronize();
        std::vector<float> want(tokens.size() * 96);
        for (size_t t = 0; t < tokens.size(); ++t) anvil::kernels::dequantize_row(table.view, tokens[t], &want[t * 96]);
        INFO(anvil::kernels::weight_type_name(type));
        CHECK(download(dout) == want);
    }
}

TEST_CASE("cuda argmax picks the CPU sampler's greedy token: the largest, the first of ties", "[cuda]") {
    auto context = device_or_skip();
    if (!context) return;
    for (int vocab : {1, 33, 1024, 151936}) {
        const int rows = 5;
        auto logits = random_vector(size_t(rows) * vocab, uint32_t(vocab), 20.0f);
        if (vocab > 100) {
            logits[size_t(1) * vocab + 77] = 50.0f;  // a tie: the earlier wins
            logits[size_t(1) * vocab + 99] = 50.0f;
            logits[size_t(2) * vocab + vocab - 1] = 60.0f;  // the last element
            logits[size_t(3) * vocab + 3] = NAN;            // passed over
        }
        const cuda::DeviceArray<float> dlogits(logits);
        cuda::DeviceArray<int32_t> dout(static_cast<size_t>(rows));
        cuda::argmax(*context, dlogits.data(), rows, vocab, dout.data());
        context->synchronize();
        const auto got = download(dout);
        for (int r = 0; r < rows; ++r) {
            const float* row = &logits[size_t(r) * vocab];
            int32_t best = 0;  // the CPU sampler's loop (engine/sampler.cpp), NaN passed over here too
            for (int i = 1; i < vocab; ++i)
                if (row[i] > row[best] || std::isnan(row[best])) best = i;
            INFO("vocab " << vocab << ", row " << r);
            CHECK(got[size_t(r)] == best);
        }
    }
}

TEST_CASE("cuda paged attention matches double-precision attention for prefill and decode tokens", "[cuda]") {
    auto context = device_or_skip();
    if (!context) return;
    struct Case {
        KvType type;
        int head_dim, n_heads, kv_heads, block_size, window;
    };
    const std::vector<Case> cases = {{KvType::F32, 128, 8, 2, 16, 0},  {KvType::BF16, 128, 8, 2, 16, 0},
                                     {KvType::F32, 64, 4, 4, 8, 0},    {KvType::BF16, 80, 6, 3, 16, 0},
                                     {KvType::F32, 256, 4, 1, 32, 37}, {KvType::BF16, 128, 8, 8, 16, 100}};
    for (const Case& c : cases) {
        INFO("kv " << (c.type == KvType::F32 ? "f32" : "bf16") << ", head_dim " << c.head_dim << ", heads " << c.n_heads
                   << "/" << c.kv_heads << ", block " << c.block_size << ", window " << c.window);
        const int kv_dim = c.kv_heads * c.head_dim, q_dim = c.n_heads * c.head_dim;
        const std::vector<int> lengths = {1, 40, 300, 17};  // positions each sequence holds
        const int max_blocks = (300 + c.block_size - 1) / c.block_size;
        const int n_blocks = int(lengths.size()) * max_blocks + 3;
        // Scrambled block tables drawn from one pool.
        std::vector<int32_t> pool(static_cast<size_t>(n_blocks));
        std::iota(pool.begin(), pool.end(), 0);
        std::shuffle(pool.begin(), pool.end(), std::mt19937(uint32_t(c.head_dim)));
        std::vector<int32_t> tables(lengths.size() * size_t(max_blocks), -1);
        size_t next = 0;
        for (size_t s = 0; s < lengths.size(); ++s)
            for (int b = 0; b < (lengths[s] + c.block_size - 1) / c.block_size; ++b) tables[s * max_blocks + b] = pool[next++];

        // Every position of every sequence is one token of a prefill batch.
        std::vector<int32_t> positions, sequence;
        for (size_t s = 0; s < lengths.size(); ++s)
            for (int p = 0; p < lengths[s]; ++p) {
                positions.push_back(p);
                sequence.push_back(int32_t(s));
            }
        const int n_tokens = int(positions.size());
        const auto k = random_vector(size_t(n_tokens) * kv_dim, 31), v = random_vector(size_t(n_tokens) * kv_dim, 32);
        const auto q = random_vector(size_t(n_tokens) * q_dim, 33);
        const size_t element = c.type == KvType::F32 ? 4 : 2;
        const size_t cache_elements = size_t(n_blocks) * c.block_size * kv_dim;
        cuda::DeviceArray<uint8_t> keys(cache_elements * element), values(cache_elements * element);
        cuda::fill_bytes(*context, keys.data(), 0xff, keys.bytes());  // NaN in every slot not written
        cuda::fill_bytes(*context, values.data(), 0xff, values.bytes());
        const cuda::DeviceArray<float> dk(k), dv(v), dq(q);
        const cuda::DeviceArray<int32_t> dpositions(positions), dsequence(sequence), dtables(tables);
        const cuda::KvBatch batch{dpositions.data(), dsequence.data(), dtables.data(), max_blocks};
        const anvil::kernels::PagedKv layer{c.type, keys.data(), values.data(), c.block_size, c.kv_heads, c.head_dim};
        cuda::kv_write(*context, layer, keys.data(), values.data(), dk.data(), dv.data(), n_tokens, batch);
        cuda::DeviceArray<float> dout(size_t(n_tokens) * q_dim);
        const float scale = 1.0f / std::sqrt(float(c.head_dim));
        cuda::attention(*context, dq.data(), layer, n_tokens, c.n_heads, batch, c.window, scale, dout.data());
        context->synchronize();
        const auto out = download(dout);

        // The cache holds each token's keys and values, rounded as KvCache::write rounds them, in
        // the slot-major layout (a position's heads side by side) the CUDA kernels keep.
        std::vector<float> stored_k(k), stored_v(v);  // the values as the cache keeps them
        if (c.type == KvType::BF16)
            for (size_t i = 0; i < k.size(); ++i) {
                stored_k[i] = anvil::kernels::bf16_to_f32(anvil::kernels::f32_to_bf16(k[i]));
                stored_v[i] = anvil::kernels::bf16_to_f32(anvil::kernels::f32_to_bf16(v[i]));
            }
        const auto cache_k = keys.to_host();
        size_t wrong_slots = 0;
        for (int t = 0; t < n_tokens; ++t) {
            const int p = positions[size_t(t)];
            const size_t slot = size_t(tables[size_t(sequence[size_t(t)]) * max_blocks + p / c.block_size]) * c.block_size +
                                size_t(p % c.block_size);
            for (int i = 0; i < kv_dim; ++i) {
                float cached;
                if (c.type == KvType::F32) {
                    std::memcpy(&cached, &cache_k[(slot * kv_dim + i) * 4], 4);
                } else {
                    uint16_t bits;
                    std::memcpy(&bits, &cache_k[(slot * kv_dim + i) * 2], 2);
                    cached = anvil::kernels::bf16_to_f32(bits);
                }
                wrong_slots += cached != stored_k[size_t(t) * kv_dim + i];
            }
        }
        report(std::string("kv_write_") + (c.type == KvType::F32 ? "f32" : "bf16") + "_slots_differing",
               double(wrong_slots));
        CHECK(wrong_slots == 0);

        // Each token against kernels::attention_reference over its sequence's contiguous keys.
        // Bound, relative to max |v|: the online softmax rescales the running sums once per
        // position a warp takes (a correction factor: exp within 2 ulp and a product, 6 u) and
        // sums them (u per position), for numerator and denominator alike, then merges eight
        // warps (the 32 u); each score q.k carries a summation error of (head_dim/32 + 8) u
        // sum|q k|, scaled, which moves the softmax's output by at most twice that; and exp of a
        // rounded difference of scores (range at most 2 scale max sum|q k|) adds u of that range
        // to each weight, along the rescaling chain too (the 12 u scale max sum|q k|).
        double worst = 0;
        std::vector<float> expected(size_t(c.head_dim));
        size_t first_token = 0;
        for (size_t s = 0; s < lengths.size(); first_token += size_t(lengths[s]), ++s) {
            const float* seq_k = &stored_k[first_token * kv_dim];
            const float* seq_v = &stored_v[first_token * kv_dim];
            for (int p = 0; p < lengths[s]; ++p) {
                const size_t t = first_token + size_t(p);
                const int first = c.window > 0 ? std::max(0, p + 1 - c.window) : 0;
                const int count = p + 1 - first;
                for (int h = 0; h < c.n_heads; ++h) {
                    const int kv_head = h / (c.n_heads / c.kv_heads);
                    const float* qh = &q[t * q_dim + size_t(h) * c.head_dim];
                    anvil::kernels::attention_reference(qh, seq_k, seq_v, c.kv_heads, c.head_dim, kv_head, first, count,
                                                        scale, expected.data());
                    double max_v = 0, max_qk = 0;
                    for (int j = first; j <= p; ++j) {
                        double qk = 0;
                        for (int i = 0; i < c.head_dim; ++i) {
                            const size_t at = (size_t(j) * c.kv_heads + kv_head) * c.head_dim + i;
                            max_v = std::max(max_v, double(std::fabs(seq_v[at])));
                            qk += std::fabs(double(qh[i]) * seq_k[at]);
                        }
                        max_qk = std::max(max_qk, qk);
                    }
                    const double bound =
                        kU * max_v * (4.0 * count + 32 + (2.0 * (c.head_dim / 32.0 + 8) + 12) * scale * max_qk) + 1e-30;
                    for (int i = 0; i < c.head_dim; ++i) {
                        const double got = out[t * q_dim + size_t(h) * c.head_dim + i];
                        const double error = std::isfinite(got) ? std::fabs(got - expected[size_t(i)]) : INFINITY;
                        worst = std::max(worst, error / bound);
                    }
                }
            }
        }
        report(std::string("attention_") + (c.type == KvType::F32 ? "f32" : "bf16"), worst);
        CHECK(worst <= 1.0);
    }
}

TEST_CASE("a cuda graph replays the kernels it captured", "[cuda]") {
    auto context = device_or_skip();
    if (!context) return;
    const size_t n = 4096;
    const auto x = random_vector(n, 41), y = random_vector(n, 42);
    cuda::DeviceArray<float> dx(x);
    const cuda::DeviceArray<float> dy(y);
    cuda::Graph graph(*context, [&] { cuda::add(*context, dx.data(), dy.data(), n); });
    context->synchronize();
    CHECK(download(dx) == x);  // capturing ran nothing
    graph.launch();
    graph.launch();
    context->synchronize();
    auto expected = x;
    anvil::kernels::add(expected.data(), y.data(), int(n));
    anvil::kernels::add(expected.data(), y.data(), int(n));
    CHECK(download(dx) == expected);
}

TEST_CASE("a cuda graph of products replays what launching them gives, cuBLAS included", "[cuda]") {
    auto context = device_or_skip();
    if (!context) return;
    const int rows = 300, cols = 512, tokens = 16;
    const TestMatrix bf16 = make_matrix(WeightType::BF16, rows, cols, 51);
    const TestMatrix q8 = make_matrix(WeightType::Q8, rows, cols, 52);
    const cuda::DeviceWeights wb(bf16.view), wq(q8.view);
    const auto x = random_vector(size_t(tokens) * cols, 53);
    const cuda::DeviceArray<float> dx(x);
    cuda::DeviceArray<float> direct_b(size_t(tokens) * rows), direct_q(size_t(tokens) * rows);
    cuda::DeviceArray<float> replay_b(size_t(tokens) * rows), replay_q(size_t(tokens) * rows);
    context->reserve_scratch(size_t(tokens) * cols * sizeof(uint16_t));  // nothing allocates while capturing
    cuda::matmul(*context, wb.view(), dx.data(), tokens, direct_b.data(), cuda::MatmulPath::Cublas);
    cuda::matmul(*context, wq.view(), dx.data(), tokens, direct_q.data(), cuda::MatmulPath::Own);
    cuda::Graph graph(*context, [&] {
        cuda::matmul(*context, wb.view(), dx.data(), tokens, replay_b.data(), cuda::MatmulPath::Cublas);
        cuda::matmul(*context, wq.view(), dx.data(), tokens, replay_q.data(), cuda::MatmulPath::Own);
    });
    graph.launch();
    context->synchronize();
    // Our kernel sums in a fixed order: the same bits. cuBLAS may pick another algorithm inside a
    // graph: within its rounding bound of the direct result (twice the bound of one product).
    CHECK(download(replay_q) == download(direct_q));
    const auto got = download(replay_b), want = download(direct_b);
    double worst = 0;
    for (int t = 0; t < tokens; ++t)
        for (int r = 0; r < rows; ++r) {
            double magnitude = 0;
            for (int k = 0; k < cols; ++k)
                magnitude += std::fabs(bf16.exact[size_t(r) * cols + k] * x[size_t(t) * cols + k]);
            const size_t at = size_t(t) * rows + r;
            const double bound = 2 * (1.0 / 256 + 2.0 * cols * kU) * magnitude + 1e-30;
            worst = std::max(worst, std::isfinite(got[at]) ? std::fabs(double(got[at]) - want[at]) / bound : INFINITY);
        }
    report("graph_cublas_replay", worst);
    CHECK(worst <= 1.0);
}

#endif  // ANVIL_HAVE_CUDA_KERNELS
