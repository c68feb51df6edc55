#include "kernels/matmul.hpp"

#include <immintrin.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/ggml_blocks.hpp"

namespace anvil::kernels {

namespace {

// Each `group` (a multiple of 32) consecutive values of x to int8 with one scale (largest
// magnitude / 127), with AVX2 (this file's baseline): a scalar loop called lrintf per value, which
// cost a decode step several microseconds a product.
void round_groups(const float* x, int n_tokens, int cols, int group, int8_t* values, float* scales) {
    const int groups = cols / group;
    const __m256 magnitude_bits = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i top = _mm256_set1_epi32(127), bottom = _mm256_set1_epi32(-127);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // undoes the packs' lane interleave
    for (int t = 0; t < n_tokens; ++t)
        for (int g = 0; g < groups; ++g) {
            const float* in = x + size_t(t) * cols + size_t(g) * group;
            int8_t* out = values + size_t(t) * cols + size_t(g) * group;
            // max(|x|, running) keeps the running value where x is NaN, as fmax does. Four running
            // maxima, so that a super-block's 32 loads are not one chain of dependent maxima; the
            // largest is the same.
            __m256 r0 = _mm256_setzero_ps(), r1 = r0, r2 = r0, r3 = r0;
            for (int k = 0; k < group; k += 32) {
                r0 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(in + k), magnitude_bits), r0);
                r1 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(in + k + 8), magnitude_bits), r1);
                r2 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(in + k + 16), magnitude_bits), r2);
                r3 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(in + k + 24), magnitude_bits), r3);
            }
            const __m256 both = _mm256_max_ps(_mm256_max_ps(r0, r1), _mm256_max_ps(r2, r3));
            __m128 m = _mm_max_ps(_mm256_castps256_ps128(both), _mm256_extractf128_ps(both, 1));
            m = _mm_max_ps(m, _mm_movehl_ps(m, m));
            m = _mm_max_ss(m, _mm_movehdup_ps(m));
            const float largest = _mm_cvtss_f32(m);
            // The same float operations as matmul_avx512vnni.cpp's quantize_int8, so that every
            // vector level rounds a token's activations to the same int8 values: the product by the
            // inverse, rounded to nearest even (the default rounding, as lrint), kept within +-127.
            const float scale = largest / 127.0f;
            const float inverse = scale > 0.0f ? 1.0f / scale : 0.0f;
            scales[size_t(t) * groups + g] = scale;
            const __m256 by = _mm256_set1_ps(inverse);
            for (int k = 0; k < group; k += 32) {
                __m256i q[4];
                // Unrolled, so that q stays in registers: GCC kept it on the stack otherwise, a
                // store and a reload for each 8 values.
#pragma GCC unroll 4
                for (int i = 0; i < 4; ++i) {
                    q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(in + k + 8 * i), by));
                    q[i] = _mm256_max_epi32(_mm256_min_epi32(q[i], top), bottom);
                }
                const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), _mm256_permutevar8x32_epi32(bytes, order));
            }
        }
}

// The sums of `runs` runs of 16 int8 values: vpmaddubsw by ones pairs them, vpmaddwd by ones makes
// quads, and two horizontal adds finish a run (exact: |sum| <= 16 x 128).
void sum_runs16(const int8_t* values, size_t runs, int16_t* sums) {
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    size_t s = 0;
    for (; s + 4 <= runs; s += 4) {  // 64 values: four runs
        const __m256i a = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + 16 * s))), ones16);
        const __m256i b = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + 16 * s + 32))), ones16);
        // a: runs s (lanes 0-3) and s + 1 (4-7); b: s + 2, s + 3. hadd within 128-bit halves.
        const __m256i pairs = _mm256_hadd_epi32(a, b);     // [a0+a1, a2+a3, b0+b1, b2+b3 | a4+a5, a6+a7, b4+b5, b6+b7]
        const __m256i quads = _mm256_hadd_epi32(pairs, pairs);  // [run s, run s+2, .. | run s+1, run s+3, ..]
        const int lo0 = _mm256_extract_epi32(quads, 0), lo1 = _mm256_extract_epi32(quads, 1);
        const int hi0 = _mm256_extract_epi32(quads, 4), hi1 = _mm256_extract_epi32(quads, 5);
        sums[s] = int16_t(lo0);
        sums[s + 1] = int16_t(hi0);
        sums[s + 2] = int16_t(lo1);
        sums[s + 3] = int16_t(hi1);
    }
    for (; s < runs; ++s) {
        int sum = 0;
        for (size_t k = 0; k < 16; ++k) sum += values[s * 16 + k];
        sums[s] = int16_t(sum);
    }
}

// Whether b can be multiplied in the same step as a, on the same rounded activations: the same
// format, or the K-quants a level's kernels take together (a Q4_K_M model's v in Q6_K beside its q
// and k in Q4_K, on the half of its layers that llama-quantize gives more bits). A step is a
// rounding of the activations and a meeting of the threads.
bool one_step(const WeightMatrix& a, const WeightMatrix& b, bool vnni) {
    if (a.cols != b.cols) return false;
    if (a.type == b.type) return true;
    const WeightType q6_k = vnni ? WeightType::Q6_KPacked8 : WeightType::Q6_KPacked8Avx2;
    const auto k_quant = [q6_k](WeightType t) { return t == WeightType::Q4_KPacked8 || t == q6_k; };
    return k_quant(a.type) && k_quant(b.type);
}

}  // namespace

void detail::quantize_input(const float* x, int n_tokens, int cols, int8_t* values, float* scales) {
    round_groups(x, n_tokens, cols, kQ8Group, values, scales);
}

void detail::quantize_input_super(const float* x, int n_tokens, int cols, int8_t* values, float* scales, int16_t* sums,
                                  int16_t* sums32) {
    round_groups(x, n_tokens, cols, kSuperBlock, values, scales);
    const size_t runs = size_t(n_tokens) * size_t(cols) / 16;
    sum_runs16(values, runs, sums);
    for (size_t s = 0; s < runs / 2; ++s) sums32[s] = int16_t(sums[2 * s] + sums[2 * s + 1]);
}

void matmul_group_with(Isa isa, const WeightMatrix* ws, float* const* ys, int count, const float* x, int n_tokens) {
    if (count < 1 || count > kMaxMatmulGroup) throw std::logic_error("matmul group of " + std::to_string(count));
    for (int i = 0; i < count; ++i) {
        if ((ws[i].type == WeightType::Q8 || ws[i].type == WeightType::Q8Packed || ws[i].type == WeightType::Q8Packed8) &&
            ws[i].cols % kQ8Group != 0)
            throw std::logic_error("q8 matrix with " + std::to_string(ws[i].cols) + " columns, not a multiple of the group");
        if (is_ggml_block_type(ws[i].type) && ws[i].cols % ggml_block_values(ws[i].type) != 0)
            throw std::logic_error(std::string(weight_type_name(ws[i].type)) + " matrix with " + std::to_string(ws[i].cols) +
                                   " columns, not whole blocks");
    }
    const bool vnni = vnni_products(isa);
    // The first run of matrices that go together is one step, the rest of the group the next.
    int together = 1;
    while (together < count && one_step(ws[0], ws[together], vnni)) ++together;
    if (together < count && isa != Isa::Reference) {
        matmul_group_with(isa, ws, ys, together, x, n_tokens);
        return matmul_group_with(isa, ws + together, ys + together, count - together, x, n_tokens);
    }
    // The packed layouts for the VNNI kernels (q8's, Q6_K's) are read below them by the plain product
    // only. GGUF's blocks as the file holds them are the reference level's: the vector levels multiply
    // them packed by 8 rows (weights.cpp packs them so), and only the plain product reads them
    // row-major.
    const bool plain = ws[0].type == WeightType::Q4_0 || ws[0].type == WeightType::Q4_K || ws[0].type == WeightType::Q6_K ||
                       ((ws[0].type == WeightType::Q8Packed || ws[0].type == WeightType::Q6_KPacked8) && !vnni);
    if (isa == Isa::Reference || plain) {
        for (int i = 0; i < count; ++i) detail::matmul_reference(ws[i], x, n_tokens, ys[i]);
        return;
    }
    // Buffers kept per thread and grown only: the decode loop reuses them without allocating.
    thread_local std::vector<int8_t> q_values;
    thread_local std::vector<float> q_scales;
    detail::QuantizedInput qx{nullptr, nullptr};
    if (is_ggml_block_type(ws[0].type)) {
        if (!cpu_features().avx2_fma) throw std::runtime_error("this processor lacks AVX2/FMA");
        const bool amx = isa == Isa::Amx && cpu_features().amx_int8;
        // Q6_K laid out for the AVX2 byte products takes them at every vector level, as packed
        // q8 by 8 rows does.
        const bool vnni_blocks = vnni && ws[0].type != WeightType::Q6_KPacked8Avx2;
        const auto blocks = [vnni_blocks, amx](const WeightMatrix* ws, float* const* ys, int count, const detail::QuantizedInput* q32,
                                               const detail::SuperBlockInput* q256, int n_tokens) {
            if (vnni_blocks) return detail::matmul_vnni_blocks(ws, ys, count, q32, q256, n_tokens, amx);
            detail::matmul_avx2_blocks(ws, ys, count, q32, q256, n_tokens);
        };
        const int cols = ws[0].cols;
        const size_t n = size_t(n_tokens) * cols;
        if (q_values.size() < n) q_values.resize(n);
        if (ws[0].type == WeightType::Q4_0Packed8) {
            thread_local std::vector<int16_t> q_run_sums;
            thread_local std::vector<int32_t> q_less_8_sums;
            if (q_scales.size() < n / kQ8Group) q_scales.resize(n / kQ8Group);
            if (q_run_sums.size() < n / 16) q_run_sums.resize(n / 16);
            if (q_less_8_sums.size() < n / kQ8Group) q_less_8_sums.resize(n / kQ8Group);
            detail::quantize_input(x, n_tokens, cols, q_values.data(), q_scales.data());
            sum_runs16(q_values.data(), n / 16, q_run_sums.data());
            for (size_t g = 0; g < n / kQ8Group; ++g) q_less_8_sums[g] = -8 * (q_run_sums[2 * g] + q_run_sums[2 * g + 1]);
            qx = {q_values.data(), q_scales.data(), q_less_8_sums.data()};
            return blocks(ws, ys, count, &qx, nullptr, n_tokens);
        }
        thread_local std::vector<int16_t> q_sums, q_sums32;
        if (q_scales.size() < n / kSuperBlock) q_scales.resize(n / kSuperBlock);
        if (q_sums.size() < n / 16) q_sums.resize(n / 16);
        if (q_sums32.size() < n / 32) q_sums32.resize(n / 32);
        detail::quantize_input_super(x, n_tokens, cols, q_values.data(), q_scales.data(), q_sums.data(), q_sums32.data());
        const detail::SuperBlockInput q256{q_values.data(), q_scales.data(), q_sums.data(), q_sums32.data()};
        return blocks(ws, ys, count, nullptr, &q256, n_tokens);
    }
    // The VNNI levels round the activations themselves (with the sums their packed layout needs).
    const bool packed8 = ws[0].type == WeightType::Q8Packed8;
    if ((ws[0].type == WeightType::Q8 && int(isa) < int(Isa::Avx512Vnni)) || packed8) {
        const size_t n = size_t(n_tokens) * ws[0].cols;
        if (q_values.size() < n) q_values.resize(n);
        if (q_scales.size() < n / kQ8Group) q_scales.resize(n / kQ8Group);
        detail::quantize_input(x, n_tokens, ws[0].cols, q_values.data(), q_scales.data());
        qx = {q_values.data(), q_scales.data()};
    }
    // Packed by 8 rows: the AVX2 byte products, at every vector level (the engine packs so only
    // below VNNI).
    if (packed8) {
        if (!cpu_features().avx2_fma) throw std::runtime_error("this processor lacks AVX2/FMA");
        return detail::matmul_avx2_packed8(ws, ys, count, &qx, n_tokens);
    }
    switch (isa) {
        case Isa::Reference: break;
        case Isa::Avx2:
            if (!cpu_features().avx2_fma) throw std::runtime_error("this processor lacks AVX2/FMA");
            return detail::matmul_avx2(ws, ys, count, x, &qx, n_tokens);
        case Isa::Avx512:
            if (!cpu_features().avx512) throw std::runtime_error("this processor lacks AVX-512");
            return detail::matmul_avx512(ws, ys, count, x, &qx, n_tokens);
        case Isa::Avx512Vnni:
            if (!cpu_features().avx512_vnni) throw std::runtime_error("this processor lacks AVX-512 VNNI");
            return detail::matmul_avx512vnni(ws, ys, count, x, &qx, n_tokens);
        case Isa::Avx512Bf16:
            if (!cpu_features().avx512_bf16) throw std::runtime_error("this processor lacks AVX-512 BF16");
            return detail::matmul_avx512bf16(ws, ys, count, x, &qx, n_tokens);
        case Isa::Amx:
            if (!cpu_features().amx_int8) throw std::runtime_error("this processor (or this kernel) offers no AMX int8 tiles");
            if (ws[0].type == WeightType::Q8Packed) return detail::matmul_avx512vnni(ws, ys, count, x, &qx, n_tokens, true);
            return detail::matmul_avx512bf16(ws, ys, count, x, &qx, n_tokens);
    }
}

void matmul_with(Isa isa, const WeightMatrix& w, const float* x, int n_tokens, float* y) {
    matmul_group_with(isa, &w, &y, 1, x, n_tokens);
}

void matmul(const WeightMatrix& w, const float* x, int n_tokens, float* y) {
    matmul_group_with(active_isa(), &w, &y, 1, x, n_tokens);
}

void matmul_group(const WeightMatrix* ws, float* const* ys, int count, const float* x, int n_tokens) {
    matmul_group_with(active_isa(), ws, ys, count, x, n_tokens);
}

}  // namespace anvil::kernels
