// GGUF's block formats: blocks written byte by byte from the format's definition read back as
// the definition says (so the layout is llama.cpp's, not merely self-consistent), and the
// project's quantizers stay within their formats' rounding.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu_features.hpp"
#include "kernels/ggml_blocks.hpp"
#include "kernels/matmul.hpp"
#include "kernels/weight_matrix.hpp"
#include "kernel_matrices.hpp"

using namespace anvil::kernels;

namespace {

void put_f16(uint8_t* p, float value) {
    const uint16_t bits = f32_to_f16(value);
    std::memcpy(p, &bits, 2);
}

double rms_error(const std::vector<float>& a, const std::vector<float>& b) {
    double sum = 0;
    for (size_t i = 0; i < a.size(); ++i) sum += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    return std::sqrt(sum / double(a.size()));
}

}  // namespace

TEST_CASE("Q4_0 blocks read as d * (q - 8), low nibbles first", "[kernels][gguf]") {
    uint8_t block[kQ4_0Bytes];
    put_f16(block, 0.5f);
    for (int j = 0; j < 16; ++j) block[2 + j] = uint8_t(j | ((15 - j) << 4));
    float out[32];
    dequantize_q4_0(block, 32, out);
    for (int j = 0; j < 16; ++j) {
        CHECK(out[j] == 0.5f * float(j - 8));
        CHECK(out[16 + j] == 0.5f * float(7 - j));
    }
}

TEST_CASE("Q5_0 blocks read as d * (q - 16) with the fifth bits apart, and quantize as ggml does", "[kernels][gguf]") {
    uint8_t block[kQ5_0Bytes];
    put_f16(block, 0.25f);
    uint32_t high = 0;
    auto q_of = [](int v) { return (v * 13 + 7) % 32; };
    for (int j = 0; j < 16; ++j) {
        block[6 + j] = uint8_t((q_of(j) & 15) | ((q_of(j + 16) & 15) << 4));
        high |= uint32_t(q_of(j) >> 4) << j;
        high |= uint32_t(q_of(j + 16) >> 4) << (j + 16);
    }
    std::memcpy(block + 2, &high, 4);
    float out[32];
    dequantize_q5_0(block, 32, out);
    for (int v = 0; v < 32; ++v) CHECK(out[v] == 0.25f * float(q_of(v) - 16));
    // ggml's rounding: the extreme -20 gives d = 1.25 and q = 0; values within half a step.
    std::vector<float> ramp(32);
    for (int i = 0; i < 32; ++i) ramp[size_t(i)] = float(i) - 20.0f;
    quantize_q5_0(ramp.data(), 32, block);
    dequantize_q5_0(block, 32, out);
    for (int i = 0; i < 32; ++i) CHECK(std::fabs(out[i] - ramp[size_t(i)]) <= 1.25f / 2);
    CHECK(out[0] == -20.0f);
}

TEST_CASE("Q4_K super-blocks read as d * sc * q - dmin * m with ggml's 6-bit scale packing", "[kernels][gguf]") {
    uint8_t block[kQ4_KBytes] = {};
    put_f16(block, 0.25f);
    put_f16(block + 2, 0.125f);
    // Scales and mins that need all six bits, packed by ggml's get_scale_min_k4 read backwards.
    int sc[8], m[8];
    for (int j = 0; j < 8; ++j) {
        sc[j] = 5 + 7 * j;   // 5 .. 54
        m[j] = 60 - 8 * j;   // 60 .. 4
    }
    uint8_t* s = block + 4;
    for (int j = 0; j < 4; ++j) {
        s[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = uint8_t((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        s[j + 8] = uint8_t((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
    uint8_t unpacked[16];
    unpack_q4_k_scales(s, unpacked);
    for (int j = 0; j < 8; ++j) {
        CHECK(int(unpacked[j]) == sc[j]);
        CHECK(int(unpacked[8 + j]) == m[j]);
    }
    // Value v of the block: chunk v / 64 of 32 bytes; the low nibble for the first 32 of the chunk.
    auto q_of = [](int v) { return (v * 7 + 3) % 16; };
    for (int v = 0; v < 256; ++v) {
        uint8_t& byte = block[16 + 32 * (v / 64) + v % 32];
        byte = uint8_t(v % 64 < 32 ? (byte & 0xf0) | q_of(v) : (byte & 0x0f) | (q_of(v) << 4));
    }
    float out[256];
    dequantize_q4_k(block, 256, out);
    for (int v = 0; v < 256; ++v) {
        const int j = v / 32;
        INFO("value " << v);
        CHECK(out[v] == Approx(0.25 * sc[j] * q_of(v) - 0.125 * m[j]).epsilon(1e-6).margin(1e-6));
    }
}

TEST_CASE("Q6_K super-blocks read as d * scale * (q - 32) from ql, qh and int8 scales", "[kernels][gguf]") {
    uint8_t block[kQ6_KBytes] = {};
    put_f16(block + 208, 0.5f);
    int8_t scales[16];
    for (int j = 0; j < 16; ++j) scales[j] = int8_t(j % 2 ? -(3 * j + 1) : 2 * j + 1);
    std::memcpy(block + 192, scales, 16);
    auto q_of = [](int v) { return (v * 11 + 5) % 64; };
    for (int v = 0; v < 256; ++v) {
        const int h = v / 128, i = v % 128, l = i % 32, quarter = i / 32;
        uint8_t* ql = block + 64 * h + l + (quarter % 2 ? 32 : 0);
        uint8_t* qh = block + 128 + 32 * h + l;
        const int q = q_of(v);
        *ql = uint8_t(quarter < 2 ? (*ql & 0xf0) | (q & 15) : (*ql & 0x0f) | ((q & 15) << 4));
        *qh = uint8_t(*qh | ((q >> 4) << (2 * quarter)));
    }
    float out[256];
    dequantize_q6_k(block, 256, out);
    for (int v = 0; v < 256; ++v) {
        INFO("value " << v);
        CHECK(out[v] == Approx(0.5 * scales[v / 16] * (q_of(v) - 32)).epsilon(1e-6));
    }
}

TEST_CASE("the quantizers stay within their formats' rounding and read back through WeightMatrix", "[kernels][gguf]") {
    const int n = 4096;
    const auto x = anvil::test::random_vector(n, 5);
    struct Format {
        WeightType type;
        size_t bytes;
        double worst_rms;  // of values uniform in [-1, 1]: about a step / sqrt(12), a step being 2 / levels
    };
    for (const Format& f : {Format{WeightType::Q4_0, q4_0_row_bytes(n), 2.0 / 15 / std::sqrt(12.0) * 1.15},
                            Format{WeightType::Q4_K, q4_k_row_bytes(n), 2.0 / 15 / std::sqrt(12.0) * 1.05},
                            Format{WeightType::Q6_K, q6_k_row_bytes(n), 2.0 / 63 / std::sqrt(12.0) * 1.05}}) {
        INFO(weight_type_name(f.type));
        std::vector<uint8_t> bytes(f.bytes);
        if (f.type == WeightType::Q4_0) quantize_q4_0(x.data(), n, bytes.data());
        else if (f.type == WeightType::Q4_K) quantize_q4_k(x.data(), n, bytes.data());
        else quantize_q6_k(x.data(), n, bytes.data());
        const WeightMatrix w{f.type, 1, n, bytes.data(), nullptr};
        std::vector<float> back(n);
        dequantize_row(w, 0, back.data());
        const double rms = rms_error(x, back);
        CHECK(rms < f.worst_rms);
        double worst = 0;
        for (int i = 0; i < n; ++i) worst = std::max(worst, std::fabs(double(x[size_t(i)]) - back[size_t(i)]));
        CHECK(worst < 3 * f.worst_rms * std::sqrt(3.0));
    }
    // Zeros stay zeros, and ggml's Q4_0 rounding is kept: the extreme maps to q = 0, d = extreme / -8.
    std::vector<float> zeros(256, 0.0f), back(256);
    std::vector<uint8_t> k(kQ4_KBytes), six(kQ6_KBytes);
    quantize_q4_k(zeros.data(), 256, k.data());
    quantize_q6_k(zeros.data(), 256, six.data());
    dequantize_q4_k(k.data(), 256, back.data());
    CHECK(rms_error(zeros, back) == 0);
    dequantize_q6_k(six.data(), 256, back.data());
    CHECK(rms_error(zeros, back) == 0);
    std::vector<float> ramp(32);
    for (int i = 0; i < 32; ++i) ramp[size_t(i)] = float(i) - 20.0f;  // extreme -20: d = 2.5
    uint8_t q40[kQ4_0Bytes];
    quantize_q4_0(ramp.data(), 32, q40);
    uint16_t bits;
    std::memcpy(&bits, q40, 2);
    CHECK(f16_to_f32(bits) == 2.5f);
    CHECK((q40[2] & 15) == 0);  // -20 / 2.5 + 8 = 0
}

TEST_CASE("each layout packed by 8 rows holds every row's values exactly, padding rows apart", "[kernels][gguf]") {
    const int rows = 21, cols = 768;  // two whole 8-row blocks and one of 5 rows and 3 of padding
    const auto x = anvil::test::random_vector(size_t(rows) * cols, 11, 2.0f);
    struct Layout {
        WeightType packed;
        size_t (*row_bytes)(int);
        void (*quantize)(const float*, size_t, uint8_t*);
        size_t (*bytes)(int, int);
        void (*pack)(const uint8_t*, int, int, uint8_t*);
    };
    for (const Layout& l : {Layout{WeightType::Q4_0Packed8, q4_0_row_bytes, quantize_q4_0, q4_0_packed8_bytes, pack_q4_0_rows8},
                            Layout{WeightType::Q4_KPacked8, q4_k_row_bytes, quantize_q4_k, q4_k_packed8_bytes, pack_q4_k_rows8},
                            Layout{WeightType::Q6_KPacked8, q6_k_row_bytes, quantize_q6_k, q6_k_packed8_bytes, pack_q6_k_rows8},
                            Layout{WeightType::Q6_KPacked8Avx2, q6_k_row_bytes, quantize_q6_k, q6_k_packed8_bytes, pack_q6_k_rows8_avx2}}) {
        INFO(weight_type_name(l.packed));
        const WeightType stored = l.packed == WeightType::Q4_0Packed8 ? WeightType::Q4_0
                                  : l.packed == WeightType::Q4_KPacked8 ? WeightType::Q4_K
                                                                        : WeightType::Q6_K;
        std::vector<uint8_t> blocks(l.row_bytes(cols) * rows);
        for (int r = 0; r < rows; ++r) l.quantize(&x[size_t(r) * cols], cols, &blocks[l.row_bytes(cols) * size_t(r)]);
        std::vector<uint8_t> packed(l.bytes(rows, cols));
        l.pack(blocks.data(), rows, cols, packed.data());
        const WeightMatrix as_stored{stored, rows, cols, blocks.data(), nullptr}, as_packed{l.packed, rows, cols, packed.data(), nullptr};
        std::vector<float> want(cols), got(cols);
        bool same = true;
        for (int r = 0; r < rows; ++r) {
            dequantize_row(as_stored, r, want.data());
            dequantize_row(as_packed, r, got.data());
            same = same && std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0;
        }
        CHECK(same);
    }
}

TEST_CASE("the block products equal the exact product of the rounded activations at every vector level", "[kernels][gguf]") {
    // The loose bound of test_kernels.cpp allows any rounding of the inputs within half a step;
    // this one takes the int8 activations as llama.cpp's q8_0 (Q4_0) and q8_K (Q4_K, Q6_K) round
    // them, and leaves the kernels only float rounding.
    std::vector<Isa> isas;
    if (cpu_features().avx2_fma) isas.push_back(Isa::Avx2);
    if (cpu_features().avx512) isas.push_back(Isa::Avx512);
    if (cpu_features().avx512_vnni) isas.push_back(Isa::Avx512Vnni);
    if (cpu_features().avx512_bf16) isas.push_back(Isa::Avx512Bf16);
    if (cpu_features().amx_int8) isas.push_back(Isa::Amx);
    if (isas.empty()) {
        WARN("SKIPPED: this processor has no vector level");
        return;
    }
    // 13 rows: one item of two 8-row blocks; 21: a pair and a lone block (the kernels take the two
    // blocks of an item together for a lone token, and at the VNNI levels for their 512-bit tiles of
    // several tokens). 15 tokens: at the VNNI levels a pair's 512-bit tiles of 8 and 4 (Q4_0),
    // three of 4 (Q4_K) or two of 6 (Q6_K), a lone block's 256-bit tiles of 4, then the 256-bit
    // tile of 2 (Q6_K) and lone tokens; at AVX2 tiles of 4, 2 and a lone token (Q6_K) or seven of 2
    // and a lone token. 10 tokens: Q6_K's pair tiles of 6 and 4, Q4_0's 8 and two lone tokens.
    for (const int rows : {13, 21}) {
        for (const int tokens : {10, 15}) {
            for (WeightType type : {WeightType::Q4_KPacked8, WeightType::Q6_KPacked8, WeightType::Q4_0Packed8, WeightType::Q6_KPacked8Avx2}) {
                const int cols = 768;
                const auto m = anvil::test::make_matrix(type, rows, cols, 41);
                const auto x = anvil::test::random_vector(size_t(tokens) * cols, 42, 3.0f);
                const int group = type == WeightType::Q4_0Packed8 ? 32 : 256;
                std::vector<int8_t> values(x.size());
                std::vector<float> scales(x.size() / size_t(group));
                std::vector<int16_t> sums(x.size() / 16), sums32(x.size() / 32);
                if (group == 32) detail::quantize_input(x.data(), tokens, cols, values.data(), scales.data());
                else detail::quantize_input_super(x.data(), tokens, cols, values.data(), scales.data(), sums.data(), sums32.data());
                for (size_t s = 0; s < sums.size() && group != 32; ++s) {
                    int sum = 0;
                    for (size_t k = 0; k < 16; ++k) sum += values[s * 16 + k];
                    REQUIRE(sums[s] == sum);
                    if (s % 2) REQUIRE(sums32[s / 2] == sums[s - 1] + sums[s]);
                }
                for (Isa isa : isas) {
                    // Below the VNNI levels Q6_K's VNNI layout takes the plain product, of unrounded activations.
                    if (type == WeightType::Q6_KPacked8 && !vnni_products(isa)) continue;
                    INFO(weight_type_name(type) << " " << isa_name(isa) << ", " << rows << " rows, " << tokens << " tokens");
                    std::vector<float> y(size_t(tokens) * rows);
                    matmul_with(isa, m.view, x.data(), tokens, y.data());
                    double worst = 0;
                    for (int t = 0; t < tokens; ++t)
                        for (int r = 0; r < rows; ++r) {
                            double exact = 0, magnitude = 0;
                            for (int k = 0; k < cols; ++k) {
                                const size_t at = size_t(t) * cols + size_t(k);
                                const double p = m.exact[size_t(r) * cols + size_t(k)] * double(values[at]) * scales[at / size_t(group)];
                                exact += p;
                                magnitude += std::fabs(p);
                            }
                            worst = std::max(worst, std::fabs(y[size_t(t) * rows + size_t(r)] - exact) / magnitude);
                        }
                    CHECK(worst < 1e-6);
                }
            }
        }
    }
}
