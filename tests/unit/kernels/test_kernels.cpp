// Every kernel against a plain double-precision reference, at every instruction-set level this
// processor offers; and the batch-invariance the deterministic serving rests on.
#include <catch2/catch.hpp>

#include <omp.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <random>
#include <vector>

#include "kernels/attention.hpp"
#include "kernels/convert.hpp"
#include "kernels/cpu_features.hpp"
#include "kernels/matmul.hpp"
#include "kernels/matmul_tiling.hpp"
#include "kernels/ops.hpp"
#include "kernels/team.hpp"
#include "kernel_matrices.hpp"

using namespace anvil::kernels;
using anvil::test::make_matrix;
using anvil::test::random_vector;
using anvil::test::TestMatrix;

namespace {

std::vector<Isa> available_isas() {
    std::vector<Isa> isas = {Isa::Reference};
    if (cpu_features().avx2_fma) isas.push_back(Isa::Avx2);
    if (cpu_features().avx512) isas.push_back(Isa::Avx512);
    if (cpu_features().avx512_vnni) isas.push_back(Isa::Avx512Vnni);
    if (cpu_features().avx512_bf16) isas.push_back(Isa::Avx512Bf16);
    if (cpu_features().amx_int8) isas.push_back(Isa::Amx);
    return isas;
}


}  // namespace

TEST_CASE("matrix products match the double-precision reference for every format, shape and ISA", "[kernels]") {
    struct Shape {
        int rows, cols;
    };
    for (WeightType type : {WeightType::F32, WeightType::BF16, WeightType::F16, WeightType::Q8, WeightType::Q8Packed, WeightType::Q8Packed8,
                            WeightType::Q4_0, WeightType::Q4_K, WeightType::Q6_K, WeightType::Q4_KPacked8, WeightType::Q6_KPacked8, WeightType::Q4_0Packed8,
                            WeightType::Q6_KPacked8Avx2}) {
        const bool q8 = type == WeightType::Q8 || type == WeightType::Q8Packed || type == WeightType::Q8Packed8;
        const bool super_blocks = type == WeightType::Q4_K || type == WeightType::Q6_K || type == WeightType::Q4_KPacked8 ||
                                  type == WeightType::Q6_KPacked8 || type == WeightType::Q6_KPacked8Avx2;
        const std::vector<Shape> shapes = super_blocks ? std::vector<Shape>{{1, 256}, {7, 512}, {37, 768}, {64, 256}}
                                          : q8 || type == WeightType::Q4_0 || type == WeightType::Q4_0Packed8 ? std::vector<Shape>{{1, 32}, {7, 64}, {37, 96}, {64, 256}}
                                                                           : std::vector<Shape>{{1, 1}, {5, 19}, {37, 100}, {64, 256}, {9, 8}};
        for (const Shape& shape : shapes) {
            const TestMatrix m = make_matrix(type, shape.rows, shape.cols, uint32_t(shape.rows * 131 + shape.cols));
            for (int tokens : {1, 3, 6, 70}) {
                const auto x = random_vector(size_t(tokens) * shape.cols, uint32_t(tokens));
                for (Isa isa : available_isas()) {
                    INFO(weight_type_name(type) << " " << shape.rows << "x" << shape.cols << ", " << tokens << " tokens, "
                                                << isa_name(isa));
                    std::vector<float> y(size_t(tokens) * shape.rows, NAN);
                    matmul_with(isa, m.view, x.data(), tokens, y.data());
                    // Float rounding, plus for the vector q8 kernels the rounding of each activation
                    // to int8: half a step of its group's largest value / 127; and for the bf16 dot
                    // product the bf16 rounding of each activation: 2^-8 of it.
                    // (Packed q8 takes the plain product below the VNNI level, as Q6_K packed for it does.)
                    // Packed GGUF blocks round them as llama.cpp does: per 32 for Q4_0, per 256 for the
                    // K-quants (row-major ones take the plain product at every level).
                    const bool row_major_blocks = type == WeightType::Q4_0 || type == WeightType::Q4_K || type == WeightType::Q6_K;
                    const bool plain_below_vnni = (type == WeightType::Q8Packed || type == WeightType::Q6_KPacked8) && !vnni_products(isa);
                    const bool rounds_input = (type == WeightType::Q8 && isa != Isa::Reference) ||
                                              (type == WeightType::Q8Packed8 && isa != Isa::Reference) ||
                                              (is_ggml_block_type(type) && !row_major_blocks && isa != Isa::Reference) ||
                                              (type == WeightType::Q8Packed && isa != Isa::Reference);
                    const bool rounds = rounds_input && !plain_below_vnni;
                    const int input_group = super_blocks ? 256 : kQ8Group;
                    const double input_steps = 127.0;
                    const bool rounds_to_bf16 = type == WeightType::BF16 && int(isa) >= int(Isa::Avx512Bf16);
                    double worst = 0;
                    for (int t = 0; t < tokens; ++t)
                        for (int r = 0; r < shape.rows; ++r) {
                            double exact = 0, magnitude = 0, input_rounding = 0;
                            for (int k = 0; k < shape.cols; ++k) {
                                const double p = m.exact[size_t(r) * shape.cols + k] * x[size_t(t) * shape.cols + k];
                                exact += p;
                                magnitude += std::fabs(p);
                            }
                            for (int g = 0; rounds && g < shape.cols / input_group; ++g) {
                                double largest = 0, weights = 0;
                                for (int k = g * input_group; k < (g + 1) * input_group; ++k) {
                                    largest = std::max(largest, double(std::fabs(x[size_t(t) * shape.cols + k])));
                                    weights += std::fabs(m.exact[size_t(r) * shape.cols + k]);
                                }
                                input_rounding += largest / input_steps / 2 * weights;
                            }
                            if (rounds_to_bf16) input_rounding = magnitude / 256.0;
                            const double error = std::fabs(y[size_t(t) * shape.rows + r] - exact);
                            worst = std::max(worst, error / (2e-6 * magnitude + 1.001 * input_rounding + 1e-30));
                        }
                    CHECK(worst <= 1.0);
                }
            }
        }
    }
}

TEST_CASE("a token's product is bit-identical whatever the batch around it and the thread count", "[kernels]") {
    const int saved = omp_get_max_threads();
    for (WeightType type : {WeightType::F32, WeightType::BF16, WeightType::F16, WeightType::Q8, WeightType::Q8Packed, WeightType::Q8Packed8,
                            WeightType::Q4_0, WeightType::Q4_K, WeightType::Q6_K, WeightType::Q4_KPacked8, WeightType::Q6_KPacked8, WeightType::Q4_0Packed8,
                            WeightType::Q6_KPacked8Avx2}) {
        const int cols = is_ggml_block_type(type) ? 512 : 160;
        // Nine 8-row blocks, the last with padding rows: four items of two blocks and a lone one.
        const int rows = 69;
        const TestMatrix m = make_matrix(type, rows, cols, 7);
        const int tokens = 71;
        const auto x = random_vector(size_t(tokens) * cols, 3);
        for (Isa isa : available_isas()) {
            INFO(weight_type_name(type) << " " << isa_name(isa));
            omp_set_num_threads(2);
            std::vector<float> batched(size_t(tokens) * rows);
            matmul_with(isa, m.view, x.data(), tokens, batched.data());
            omp_set_num_threads(1);
            bool identical = true;
            for (int t = 0; t < tokens; ++t) {
                std::vector<float> alone(rows);
                matmul_with(isa, m.view, &x[size_t(t) * cols], 1, alone.data());
                identical = identical && std::equal(alone.begin(), alone.end(), batched.begin() + long(t) * rows);
            }
            CHECK(identical);
        }
    }
    omp_set_num_threads(saved);
}

TEST_CASE("the AMX tiles give the VNNI tiles' bits for packed q8, Q4_0, Q4_K and Q6_K, batch after batch", "[kernels][amx]") {
    if (!cpu_features().amx_int8) {
        WARN("SKIPPED: this processor (or kernel) offers no AMX int8 tiles");
        return;
    }
    const int saved = omp_get_max_threads();
    struct Shape {
        int rows, cols;
    };
    // One group (no pair), an odd number of groups, a padded last block (Q4_0: an item's lone last
    // 8-row block, 69 rows), a long row.
    for (const WeightType type : {WeightType::Q8Packed, WeightType::Q4_0Packed8, WeightType::Q4_KPacked8, WeightType::Q6_KPacked8}) {
        const bool super_blocks = type == WeightType::Q4_KPacked8 || type == WeightType::Q6_KPacked8;
        for (const Shape shape : super_blocks ? std::vector<Shape>{{16, 256}, {69, 512}, {37, 768}, {64, 4096}}
                                              : std::vector<Shape>{{16, 32}, {37, 96}, {69, 160}, {250, 256}, {64, 4096}}) {
            const TestMatrix m = make_matrix(type, shape.rows, shape.cols, uint32_t(shape.rows + shape.cols));
            for (int tokens : {16, 47, 64, 200}) {
                INFO(weight_type_name(type) << " " << shape.rows << "x" << shape.cols << ", " << tokens << " tokens");
                const auto x = random_vector(size_t(tokens) * shape.cols, uint32_t(tokens), 4.0f);
                std::vector<float> vnni(size_t(tokens) * shape.rows), amx(size_t(tokens) * shape.rows, NAN);
                for (int threads : {1, 2}) {
                    omp_set_num_threads(threads);
                    matmul_with(Isa::Avx512Vnni, m.view, x.data(), tokens, vnni.data());
                    matmul_with(Isa::Amx, m.view, x.data(), tokens, amx.data());
                    CHECK(std::memcmp(vnni.data(), amx.data(), vnni.size() * sizeof(float)) == 0);
                }
            }
        }
    }
    omp_set_num_threads(saved);
}

TEST_CASE("Q6_K in the AVX2 byte products' layout gives the bits of its VNNI layout's product", "[kernels]") {
    if (!cpu_features().avx512_vnni) {
        WARN("SKIPPED: this processor lacks AVX-512 VNNI to compare with");
        return;
    }
    const int saved = omp_get_max_threads();
    // The same quantized values in the two layouts: the integer sums are exact in both and the float
    // steps the same, so a model's tokens do not depend on which level packed it.
    for (const int rows : {8, 69, 256}) {
        const int cols = rows == 256 ? 4096 : 768;
        const TestMatrix avx2 = make_matrix(WeightType::Q6_KPacked8Avx2, rows, cols, 5), vnni = make_matrix(WeightType::Q6_KPacked8, rows, cols, 5);
        for (int tokens : {1, 2, 5, 70}) {
            INFO(rows << "x" << cols << ", " << tokens << " tokens");
            const auto x = random_vector(size_t(tokens) * cols, uint32_t(tokens), 3.0f);
            std::vector<float> a(size_t(tokens) * rows, NAN), b(size_t(tokens) * rows, NAN);
            for (int threads : {1, 2}) {
                omp_set_num_threads(threads);
                matmul_with(Isa::Avx2, avx2.view, x.data(), tokens, a.data());
                matmul_with(Isa::Avx512Vnni, vnni.view, x.data(), tokens, b.data());
                CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
            }
        }
    }
    omp_set_num_threads(saved);
}

TEST_CASE("f32 to bf16 rounds to nearest even, in software and with AVX-512 BF16 alike", "[kernels]") {
    CHECK(f32_to_bf16(1.0f) == 0x3f80);
    CHECK(f32_to_bf16(bf16_to_f32(0x3f80) + std::ldexp(1.0f, -8)) == 0x3f80);    // a tie rounds to even (down)
    CHECK(f32_to_bf16(bf16_to_f32(0x3f81) + std::ldexp(1.0f, -8)) == 0x3f82);    // a tie rounds to even (up)
    CHECK(f32_to_bf16(bf16_to_f32(0x3f80) + std::ldexp(1.0f, -7) * 0.75f) == 0x3f81);
    CHECK(f32_to_bf16(-2.5f) == 0xc020);
    CHECK(f32_to_bf16(INFINITY) == 0x7f80);
    CHECK(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
    CHECK(f32_to_bf16(1e-40f) == 0);  // subnormal flushes
    if (!cpu_features().avx512_bf16) {
        WARN("this processor lacks AVX-512 BF16; only the software conversion was checked");
        return;
    }
    auto values = random_vector(4099, 5, 1000.0f);
    values.push_back(1e-40f);
    values.push_back(-1e-39f);
    values.push_back(INFINITY);
    values.push_back(-0.0f);
    for (uint32_t bits = 0x3f800000; bits < 0x3f800000 + 4096; bits += 3) {  // exact ties and neighbours
        float f;
        std::memcpy(&f, &bits, 4);
        values.push_back(f);
    }
    std::vector<uint16_t> software(values.size()), hardware(values.size());
    detail::f32_to_bf16_scalar(values.data(), software.data(), values.size());
    detail::f32_to_bf16_avx512bf16(values.data(), hardware.data(), values.size());
    CHECK(software == hardware);
}

TEST_CASE("f16 widens exactly and q8 quantizes within half a step", "[kernels]") {
    CHECK(f16_to_f32(0x3c00) == 1.0f);
    CHECK(f16_to_f32(0xc000) == -2.0f);
    CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
    CHECK(f16_to_f32(0x7bff) == 65504.0f);
    CHECK(std::isinf(f16_to_f32(0x7c00)));
    const auto row = random_vector(256, 9, 3.0f);
    std::vector<int8_t> q(256);
    std::vector<float> scales(256 / kQ8Group);
    quantize_q8_row(row.data(), 256, q.data(), scales.data());
    for (int k = 0; k < 256; ++k) CHECK(std::fabs(q[size_t(k)] * scales[size_t(k / kQ8Group)] - row[size_t(k)]) <= scales[size_t(k / kQ8Group)] * 0.5f + 1e-7f);
    std::vector<float> zeros(32, 0.0f);
    quantize_q8_row(zeros.data(), 32, q.data(), scales.data());
    CHECK(scales[0] == 0.0f);
    CHECK(q[0] == 0);
}

TEST_CASE("q8 scales are f16 values that the packed layouts hold in two bytes exactly", "[kernels]") {
    // Magnitudes from tiny (subnormal f16 scales) to large, so that each scale is one f16 rounds.
    std::vector<float> row = random_vector(512, 21, 1.0f);
    for (int g = 0; g < 16; ++g)
        for (int k = 0; k < kQ8Group; ++k) row[size_t(g * kQ8Group + k)] *= std::ldexp(1.0f, 2 * g - 20);
    std::vector<int8_t> q(512);
    std::vector<float> scales(16);
    quantize_q8_row(row.data(), 512, q.data(), scales.data());
    for (int g = 0; g < 16; ++g) {
        INFO("group " << g << " scale " << scales[size_t(g)]);
        CHECK(f16_to_f32(f32_to_f16(scales[size_t(g)])) == scales[size_t(g)]);
        float largest = 0.0f;
        for (int k = 0; k < kQ8Group; ++k) largest = std::fmax(largest, std::fabs(row[size_t(g * kQ8Group + k)]));
        // The f16 scale rounds largest / 127 by at most half an f16 step (or a subnormal's unit).
        CHECK(std::fabs(scales[size_t(g)] - largest / 127.0f) <= std::fmax(largest / 127.0f * 0x1p-11f, 0x1p-25f));
        for (int k = 0; k < kQ8Group; ++k) {
            const size_t i = size_t(g * kQ8Group + k);
            // Against the rounded scale: half a step, or the clamp at 127 where it rounded down.
            CHECK(std::fabs(q[i] * scales[size_t(g)] - row[i]) <= std::fmax(scales[size_t(g)] * 0.5f, largest - 127.0f * scales[size_t(g)]) * 1.0001f);
        }
    }
    // Packed, the scales come back as they were (two rows: the padding rows' scales are zeros).
    std::vector<int8_t> two_rows(1024);
    std::vector<float> two_scales(32);
    for (int r = 0; r < 2; ++r) {
        std::copy(q.begin(), q.end(), two_rows.begin() + r * 512);
        std::copy(scales.begin(), scales.end(), two_scales.begin() + r * 16);
    }
    std::vector<uint8_t> packed(size_t(kQ8PackRows) * 512);
    std::vector<uint16_t> packed_scales(size_t(kQ8PackRows) * 16);
    pack_q8(two_rows.data(), two_scales.data(), 2, 512, packed.data(), packed_scales.data());
    std::vector<int8_t> packed8(size_t(kQ8Pack8Rows) * 512);
    std::vector<uint16_t> packed8_scales(size_t(kQ8Pack8Rows) * 16);
    pack_q8_rows8(two_rows.data(), two_scales.data(), 2, 512, packed8.data(), packed8_scales.data());
    for (int r = 0; r < 2; ++r)
        for (int g = 0; g < 16; ++g) {
            CHECK(f16_to_f32(packed_scales[q8_packed_scale_index(512, r, g)]) == scales[size_t(g)]);
            CHECK(f16_to_f32(packed8_scales[q8_packed8_scale_index(512, r, g)]) == scales[size_t(g)]);
        }
    CHECK(packed_scales[q8_packed_scale_index(512, 2, 0)] == 0);
    // A scale f16 would round is refused, not quietly changed.
    two_scales[3] = 0.1f;
    CHECK_THROWS_WITH(pack_q8(two_rows.data(), two_scales.data(), 2, 512, packed.data(), packed_scales.data()),
                      Catch::Contains("not a value f16 holds"));
    CHECK_THROWS_AS(pack_q8_rows8(two_rows.data(), two_scales.data(), 2, 512, packed8.data(), packed8_scales.data()), std::invalid_argument);
}

TEST_CASE("rmsnorm, rope, softmax and silu match their definitions", "[kernels]") {
    const int n = 67;
    const auto x = random_vector(n, 1, 2.0f);
    const auto w = random_vector(n, 2, 1.5f);
    std::vector<float> out(n);
    rmsnorm(out.data(), x.data(), w.data(), n, 1e-5f);
    double mean_square = 0;
    for (float v : x) mean_square += double(v) * v;
    mean_square /= n;
    for (int i = 0; i < n; ++i) CHECK(out[size_t(i)] == Approx(x[size_t(i)] / std::sqrt(mean_square + 1e-5) * w[size_t(i)]).epsilon(1e-5));

    const int heads = 3, hd = 8;
    auto v = random_vector(heads * hd, 3);
    const auto before = v;
    std::vector<float> cos(hd / 2), sin(hd / 2);
    for (int i = 0; i < hd / 2; ++i) cos[size_t(i)] = std::cos(0.3f * (i + 1)), sin[size_t(i)] = std::sin(0.3f * (i + 1));
    rope(v.data(), heads, hd, cos.data(), sin.data());
    for (int h = 0; h < heads; ++h)
        for (int i = 0; i < hd / 2; ++i) {
            const double a = before[size_t(h * hd + i)], b = before[size_t(h * hd + i + hd / 2)];
            CHECK(v[size_t(h * hd + i)] == Approx(a * cos[size_t(i)] - b * sin[size_t(i)]).margin(1e-6));
            CHECK(v[size_t(h * hd + i + hd / 2)] == Approx(b * cos[size_t(i)] + a * sin[size_t(i)]).margin(1e-6));
        }

    std::vector<float> s = {1000.0f, 999.0f, -5.0f, 0.0f};
    softmax(s.data(), 4);
    const double total = 1 + std::exp(-1.0) + std::exp(-1005.0) + std::exp(-1000.0);
    CHECK(s[0] == Approx(1 / total));
    CHECK(s[1] == Approx(std::exp(-1.0) / total));
    CHECK(s[2] == Approx(0).margin(1e-30));

    std::vector<float> gate = {-3.0f, 0.0f, 2.0f}, up = {2.0f, 5.0f, -1.0f};
    silu_mul(gate.data(), up.data(), 3);
    CHECK(gate[0] == Approx(-3.0 / (1 + std::exp(3.0)) * 2.0));
    CHECK(gate[1] == 0.0f);
    CHECK(gate[2] == Approx(2.0 / (1 + std::exp(-2.0)) * -1.0));
}

namespace {

// Keys and values given position by position ([positions][kv_heads][head_dim]) written into a
// paged cache's blocks in `layout`, block_table[p / block] holding position p, in a pool whose
// other slots are NaN; as f32 and as bf16.
struct PagedCache {
    int block, kv_heads, hd;
    KvLayout layout;
    std::vector<float> k, v;
    std::vector<uint16_t> k16, v16;
    PagedCache(const std::vector<float>& keys, const std::vector<float>& values, const std::vector<int32_t>& table, int pool,
               int block_, int kv_heads_, int hd_, KvLayout layout_ = KvLayout::SlotMajor)
        : block(block_), kv_heads(kv_heads_), hd(hd_), layout(layout_), k(size_t(pool) * block * kv_heads * hd, NAN),
          v(k.size(), NAN), k16(k.size()), v16(k.size()) {
        const size_t width = size_t(kv_heads) * hd, positions = keys.size() / width;
        for (size_t p = 0; p < positions; ++p)
            for (size_t h = 0; h < size_t(kv_heads); ++h)
                for (size_t i = 0; i < size_t(hd); ++i) {
                    const size_t b = size_t(table[p / size_t(block)]), slot = p % size_t(block);
                    const size_t at = layout == KvLayout::SlotMajor ? ((b * block + slot) * kv_heads + h) * hd + i
                                                                    : ((b * kv_heads + h) * block + slot) * hd + i;
                    k[at] = keys[p * width + h * hd + i];
                    v[at] = values[p * width + h * hd + i];
                }
        detail::f32_to_bf16_scalar(k.data(), k16.data(), k16.size());
        detail::f32_to_bf16_scalar(v.data(), v16.data(), v16.size());
    }
    PagedKv f32() const { return {KvType::F32, k.data(), v.data(), block, kv_heads, hd, layout}; }
    PagedKv bf16() const { return {KvType::BF16, k16.data(), v16.data(), block, kv_heads, hd, layout}; }
};

}  // namespace

TEST_CASE("paged attention matches contiguous double-precision attention, f32 and bf16 caches", "[kernels]") {
    // 20: a head dimension that is not a whole number of vectors.
    const int hd = GENERATE(16, 20);
    const int kv_heads = 2, block = 4, positions = 23;
    const auto keys = random_vector(size_t(positions) * kv_heads * hd, 11);
    const auto values = random_vector(size_t(positions) * kv_heads * hd, 12);
    const auto q = random_vector(hd, 13);
    // Blocks in scrambled order in a larger pool.
    const std::vector<int32_t> table = {5, 1, 7, 0, 3, 6};
    const int pool = 8;
    const KvLayout layout = GENERATE(KvLayout::SlotMajor, KvLayout::HeadMajor);
    INFO((layout == KvLayout::SlotMajor ? "slot-major" : "head-major") << " cache, head dim " << hd);
    const PagedCache cache(keys, values, table, pool, block, kv_heads, hd, layout);
    for (int first : {0, 9}) {
        const int count = positions - first;
        std::vector<float> expected(hd), got(hd), scores(positions);
        for (int head = 0; head < kv_heads; ++head) {
            attention_reference(q.data(), keys.data(), values.data(), kv_heads, hd, head, first, count, 0.25f, expected.data());
            attention(q.data(), cache.f32(), head, table.data(), first, count, 0.25f, scores.data(), got.data());
            for (int i = 0; i < hd; ++i) CHECK(got[size_t(i)] == Approx(expected[size_t(i)]).margin(1e-5));
            attention(q.data(), cache.bf16(), head, table.data(), first, count, 0.25f, scores.data(), got.data());
            for (int i = 0; i < hd; ++i) CHECK(got[size_t(i)] == Approx(expected[size_t(i)]).margin(2e-2));
        }
    }
}

TEST_CASE("decode's contiguous shares hand every item to exactly one thread, also shares no thread owns", "[kernels]") {
    // Teams of one and two (LLVM's libomp keeps, and LeakSanitizer reports, the descriptors of a
    // team larger than the machine's default); shares for up to three threads that are missing.
    for (int threads : {1, 2})
        for (int missing : {0, 1, 3})
            for (int items : {0, 1, 5, 64, 1001})
                for (int chunk : {1, 2, 8}) {
                    INFO(threads << " threads, " << missing << " shares unowned, " << items << " items, chunks of " << chunk);
                    std::vector<std::atomic<int>> seen(static_cast<size_t>(items));
                    std::vector<int> order;  // with a team of one: the items in the order it took them
                    ShareCounter counters[kMaxTeam];
                    const int count = threads + missing;
#pragma omp parallel num_threads(threads)
                    detail::work_shares(counters, count, omp_get_thread_num(), items, chunk, [&](int item) {
                        seen[size_t(item)].fetch_add(1);
                        if (threads == 1) order.push_back(item);
                    });
                    int once = 0;
                    for (auto& s : seen) once += s.load() == 1;
                    CHECK(once == items);
                    // One thread reads the rows as one stream: its share, then the next, in order.
                    if (threads == 1)
                        for (int i = 0; i < items; ++i) CHECK(order[size_t(i)] == i);
                }
}

TEST_CASE("a team shares each step's items once and every step sees the step before it", "[kernels]") {
    // Step s writes item i from the previous step's item (i + 1) % items, which the other thread
    // may have written: a step that began before the barrier ended would read a stale value.
    constexpr int kSteps = 300;
    for (int items : {1, 2, 7, 64, 257})
        for (int chunk : {1, 3}) {
            INFO(items << " items, chunks of " << chunk);
            std::vector<std::vector<int>> value(kSteps + 1, std::vector<int>(size_t(items), 0));
            std::vector<std::atomic<int>> visits(size_t(items) * kSteps);
            for (int i = 0; i < items; ++i) value[0][size_t(i)] = i;
            std::atomic<int> outside_team{0};
            Team team(2);
            run_as_team(team, [&] {
                if (current_team() != &team) outside_team.fetch_add(1);
                for (int s = 1; s <= kSteps; ++s)
                    share_items(false, items, chunk, [&](int i) {
                        visits[size_t(s - 1) * items + i].fetch_add(1);
                        value[size_t(s)][size_t(i)] = value[size_t(s - 1)][size_t((i + 1) % items)] + 1;
                    });
            });
            CHECK(current_team() == nullptr);
            CHECK(outside_team.load() == 0);
            int once = 0;
            for (auto& v : visits) once += v.load() == 1;
            CHECK(once == items * kSteps);
            int right = 0;
            for (int i = 0; i < items; ++i) right += value[kSteps][size_t(i)] == (i + kSteps) % items + kSteps;
            CHECK(right == items);
        }
}

TEST_CASE("a check that fails in every thread of a team is rethrown, the team works on, and a team inside a region is one", "[kernels]") {
    Team team(2);
    CHECK_THROWS_WITH(run_as_team(team, [&] {
                          share_items(false, 10, 1, [](int) {});
                          throw std::logic_error("matrix of the wrong shape");
                      }),
                      "matrix of the wrong shape");
    std::atomic<int> done{0};
    run_as_team(team, [&] { share_items(false, 100, 1, [&](int) { done.fetch_add(1); }); });
    CHECK(done.load() == 100);
    // One item of one step throws, on whichever thread took it: the run ends at that step's
    // barrier for both threads, and no later step runs.
    std::atomic<int> later{0};
    CHECK_THROWS_WITH(run_as_team(team, [&] {
                          share_items(false, 64, 1, [](int item) {
                              if (item == 37) throw std::runtime_error("item 37 failed");
                          });
                          share_items(false, 8, 1, [&](int) { later.fetch_add(1); });
                      }),
                      "item 37 failed");
    CHECK(later.load() == 0);
    done = 0;
    run_as_team(team, [&] { share_items(false, 100, 7, [&](int) { done.fetch_add(1); }); });
    CHECK(done.load() == 100);
    // Inside another region OpenMP grants one thread: the team is that one.
    int inner_size = 0, inner_done = 0;
#pragma omp parallel num_threads(2)
#pragma omp single
    run_as_team(team, [&] {
        inner_size = current_team()->size();
        share_items(false, 50, 3, [&](int) { ++inner_done; });
    });
    CHECK(inner_size == 1);
    CHECK(inner_done == 50);
    CHECK(team.capacity() == 2);
    CHECK_THROWS_AS(Team(0), std::invalid_argument);
    CHECK_THROWS_AS(Team(kMaxTeam + 1), std::invalid_argument);
}

TEST_CASE("a team's waiters spin as long as libgomp's settings say, then sleep", "[kernels]") {
    // The environment as this process had it, put back after.
    struct Saved {
        std::string name;
        std::optional<std::string> value;
        explicit Saved(std::string n) : name(std::move(n)) {
            if (const char* v = std::getenv(name.c_str())) value = v;
        }
        ~Saved() {
            if (value) setenv(name.c_str(), value->c_str(), 1);
            else unsetenv(name.c_str());
        }
    } count("GOMP_SPINCOUNT"), policy("OMP_WAIT_POLICY");
    auto spins = [](const char* spincount, const char* wait_policy) {
        if (spincount) setenv("GOMP_SPINCOUNT", spincount, 1);
        else unsetenv("GOMP_SPINCOUNT");
        if (wait_policy) setenv("OMP_WAIT_POLICY", wait_policy, 1);
        else unsetenv("OMP_WAIT_POLICY");
        return Team(2).spins();
    };
    const auto forever = std::numeric_limits<std::uint64_t>::max();
    CHECK(spins("1000", "passive") == 1000);  // what anvil-engine sets
    CHECK(spins("0", nullptr) == 0);
    CHECK(spins("5k", nullptr) == 5000);
    CHECK(spins("2M", "active") == 2000000);
    CHECK(spins("infinity", nullptr) == forever);
    CHECK(spins("99999999999T", nullptr) == forever);
    // A count libgomp would not take is ignored: the policy decides.
    CHECK(spins("lots", "passive") == 0);
    CHECK(spins("-3", "ACTIVE") == forever);
    CHECK(spins(nullptr, nullptr) == 300000);
    // Sleeping waiters are woken: no spin at all, many short steps.
    setenv("GOMP_SPINCOUNT", "0", 1);
    Team sleepy(2);
    std::atomic<int> done{0};
    run_as_team(sleepy, [&] {
        for (int step = 0; step < 2000; ++step) share_items(false, 3, 1, [&](int) { done.fetch_add(1); });
    });
    CHECK(done.load() == 6000);
}

TEST_CASE("grouped-query attention of several heads at once equals each head's own attention", "[kernels]") {
    // 64 and 128: whole 16-value steps; 24: an 8-value step at the end; 20: not whole vectors
    // (the head-at-a-time fallback). Six heads: a chunk of four, then two.
    const int hd = GENERATE(64, 128, 24, 20);
    const int heads = GENERATE(1, 3, 6);
    const int kv_heads = 2, block = 16, positions = 77;
    const auto keys = random_vector(size_t(positions) * kv_heads * hd, 31);
    const auto values = random_vector(size_t(positions) * kv_heads * hd, 32);
    const auto q = random_vector(size_t(heads) * hd, 33);
    const std::vector<int32_t> table = {0, 8, 6, 9, 7};  // five blocks, scrambled in a pool of ten
    const int pool = 10;
    const PagedCache cache(keys, values, table, pool, block, kv_heads, hd);
    const PagedCache head_major(keys, values, table, pool, block, kv_heads, hd, KvLayout::HeadMajor);
    for (int first : {0, 30}) {
        const int count = positions - first;
        std::vector<float> together(size_t(heads) * hd), alone(hd), expected(hd), scores(size_t(4) * positions);
        std::vector<float> from_head_major(together.size());
        for (const auto& [kv, same_in_head_major] : {std::pair{cache.f32(), head_major.f32()}, std::pair{cache.bf16(), head_major.bf16()}}) {
            attention_heads(q.data(), heads, kv, 1, table.data(), first, count, 0.125f, scores.data(), together.data());
            // The layout moves the elements, not the sums: the same floats from either.
            attention_heads(q.data(), heads, same_in_head_major, 1, table.data(), first, count, 0.125f, scores.data(),
                            from_head_major.data());
            for (size_t i = 0; i < together.size(); ++i) CHECK(from_head_major[i] == together[i]);
            for (int h = 0; h < heads; ++h) {
                INFO("head dim " << hd << ", head " << h << " of " << heads << ", from " << first << (kv.type == KvType::BF16 ? ", bf16" : ", f32"));
                attention(q.data() + h * hd, kv, 1, table.data(), first, count, 0.125f, scores.data(), alone.data());
                // Each head's own sums in the same order: the same floats, whichever heads it shares a pass with.
                for (int i = 0; i < hd; ++i) CHECK(together[size_t(h * hd + i)] == alone[size_t(i)]);
                if (kv.type == KvType::F32) {
                    attention_reference(q.data() + h * hd, keys.data(), values.data(), kv_heads, hd, 1, first, count, 0.125f,
                                        expected.data());
                    for (int i = 0; i < hd; ++i) CHECK(alone[size_t(i)] == Approx(expected[size_t(i)]).margin(1e-5));
                }
            }
        }
    }
}

TEST_CASE("attention's value sums are each column's fused multiply-adds over the positions in order, at every level",
          "[kernels]") {
    // The AVX2 pass sums 16 columns a walk, the AVX-512 one up to 128: both must be this chain, so
    // that a token's output does not depend on the processor's level. The weights are what the call
    // leaves in `scores` (each head's softmax over the positions).
    const int hd = GENERATE(64, 128, 80, 24, 256);
    const int heads = GENERATE(1, 2, 3, 4);
    const int kv_heads = 2, block = 16, positions = 77, first = 5, count = positions - first;
    const auto keys = random_vector(size_t(positions) * kv_heads * hd, 41);
    const auto values = random_vector(size_t(positions) * kv_heads * hd, 42);
    const auto q = random_vector(size_t(heads) * hd, 43);
    const std::vector<int32_t> table = {0, 8, 6, 9, 7};
    const PagedCache cache(keys, values, table, 10, block, kv_heads, hd, KvLayout::HeadMajor);
    for (const PagedKv& kv : {cache.f32(), cache.bf16()}) {
        std::vector<float> out(size_t(heads) * hd), scores(size_t(4) * positions);
        attention_heads(q.data(), heads, kv, 1, table.data(), first, count, 0.125f, scores.data(), out.data());
        for (int h = 0; h < heads; ++h)
            for (int i = 0; i < hd; ++i) {
                float sum = 0.0f;
                for (int j = 0; j < count; ++j) {
                    float v = values[(size_t(first + j) * kv_heads + 1) * hd + i];
                    if (kv.type == KvType::BF16) v = bf16_to_f32(f32_to_bf16(v));
                    sum = std::fma(scores[size_t(h) * count + j], v, sum);
                }
                INFO(isa_name(active_isa()) << ", head dim " << hd << ", head " << h << " of " << heads << ", column " << i
                                           << (kv.type == KvType::BF16 ? ", bf16" : ", f32"));
                CHECK(out[size_t(h * hd + i)] == sum);
            }
    }
}

TEST_CASE("a group of products sharing one input gives each matrix's own product exactly", "[kernels]") {
    for (WeightType type : {WeightType::F32, WeightType::BF16, WeightType::F16, WeightType::Q8, WeightType::Q8Packed, WeightType::Q8Packed8,
                            WeightType::Q4_0, WeightType::Q4_K, WeightType::Q6_K, WeightType::Q4_KPacked8, WeightType::Q6_KPacked8, WeightType::Q4_0Packed8,
                            WeightType::Q6_KPacked8Avx2}) {
        const int cols = is_ggml_block_type(type) ? 256 : 96;
        const TestMatrix a = make_matrix(type, 45, cols, 21), b = make_matrix(type, 13, cols, 22), c = make_matrix(type, 64, cols, 23);
        const WeightMatrix group[] = {a.view, b.view, c.view};
        for (int tokens : {1, 9}) {
            const auto x = random_vector(size_t(tokens) * cols, 24);
            for (Isa isa : available_isas()) {
                INFO(weight_type_name(type) << " " << isa_name(isa) << " " << tokens << " tokens");
                std::vector<float> ya(size_t(tokens) * 45), yb(size_t(tokens) * 13), yc(size_t(tokens) * 64);
                float* const outs[] = {ya.data(), yb.data(), yc.data()};
                matmul_group_with(isa, group, outs, 3, x.data(), tokens);
                for (int i = 0; i < 3; ++i) {
                    std::vector<float> alone(size_t(tokens) * size_t(group[i].rows));
                    matmul_with(isa, group[i], x.data(), tokens, alone.data());
                    CHECK(std::equal(alone.begin(), alone.end(), outs[i]));
                }
            }
        }
    }
}

TEST_CASE("a group mixing formats gives each matrix's own product exactly", "[kernels]") {
    // A Q4_K_M model's q and k are Q4_K and its v Q6_K on half its layers: the two K-quants share
    // one rounding and one step at a vector level, in the Q6_K layout that level multiplies. Other
    // mixes (Q4_0 beside them, Q6_K in the other level's layout) run as steps of their own.
    const int cols = 512;
    for (Isa isa : available_isas()) {
        const WeightType q6_k = vnni_products(isa) ? WeightType::Q6_KPacked8 : WeightType::Q6_KPacked8Avx2;
        const WeightType other_q6_k = vnni_products(isa) ? WeightType::Q6_KPacked8Avx2 : WeightType::Q6_KPacked8;
        const std::vector<std::vector<WeightType>> groups = {{WeightType::Q4_KPacked8, WeightType::Q4_KPacked8, q6_k},
                                                             {q6_k, WeightType::Q4_KPacked8},
                                                             {WeightType::Q4_KPacked8, WeightType::Q4_0Packed8, q6_k, other_q6_k}};
        for (const auto& types : groups) {
            std::vector<TestMatrix> matrices;
            for (size_t m = 0; m < types.size(); ++m) matrices.push_back(make_matrix(types[m], 24 + 16 * int(m), cols, 61 + uint32_t(m)));
            std::vector<WeightMatrix> group;
            for (const auto& m : matrices) group.push_back(m.view);
            for (int tokens : {1, 5}) {
                const auto x = random_vector(size_t(tokens) * cols, 62);
                std::vector<std::vector<float>> outs;
                std::vector<float*> out_pointers;
                for (const auto& w : group) outs.emplace_back(size_t(tokens) * size_t(w.rows));
                for (auto& o : outs) out_pointers.push_back(o.data());
                matmul_group_with(isa, group.data(), out_pointers.data(), int(group.size()), x.data(), tokens);
                for (size_t m = 0; m < group.size(); ++m) {
                    INFO(isa_name(isa) << ", " << weight_type_name(group[m].type) << " at " << m << " of " << group.size() << ", "
                                       << tokens << " tokens");
                    std::vector<float> alone(size_t(tokens) * size_t(group[m].rows));
                    matmul_with(isa, group[m], x.data(), tokens, alone.data());
                    CHECK(alone == outs[m]);
                }
            }
        }
    }
}
