#include "kernels/attention.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/ops.hpp"
#include "kernels/weight_matrix.hpp"

namespace anvil::kernels {
namespace {

// Eight consecutive bf16 values widened to floats.
inline __m256 load_bf16x8(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

float dot_bf16(const float* q, const uint16_t* k, int n) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load_bf16x8(k + i), acc);
    __m128 low = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    low = _mm_add_ps(low, _mm_movehl_ps(low, low));
    low = _mm_add_ss(low, _mm_movehdup_ps(low));
    float sum = _mm_cvtss_f32(low);
    for (; i < n; ++i) sum += q[i] * bf16_to_f32(k[i]);
    return sum;
}

// out[0..n) += p * v[0..n)
void add_scaled(float* out, float p, const float* v, int n) {
    const __m256 pv = _mm256_set1_ps(p);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + i), _mm256_loadu_ps(out + i)));
    for (; i < n; ++i) out[i] = std::fma(p, v[i], out[i]);
}

void add_scaled(float* out, float p, const uint16_t* v, int n) {
    const __m256 pv = _mm256_set1_ps(p);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_fmadd_ps(pv, load_bf16x8(v + i), _mm256_loadu_ps(out + i)));
    for (; i < n; ++i) out[i] = std::fma(p, bf16_to_f32(v[i]), out[i]);
}

// Calls visit(j, slot) for positions first + j, j = 0 .. count-1, with the cache slot each lives
// in: a block-table lookup per block rather than a division per position.
template <typename Visit>
void walk_slots(const PagedKv& kv, const int32_t* block_table, int first, int count, Visit visit) {
    int j = 0;
    while (j < count) {
        const int position = first + j;
        const int offset = position % kv.block_size;
        const int run = std::min(kv.block_size - offset, count - j);
        const size_t slot = size_t(block_table[position / kv.block_size]) * size_t(kv.block_size) + size_t(offset);
        for (int s = 0; s < run; ++s) visit(j + s, slot + size_t(s));
        j += run;
    }
}

template <typename Element>
void attend(const float* q, const PagedKv& kv, int kv_head, const int32_t* block_table, int first, int count, float scale,
            float* scores, float* out) {
    const int d = kv.head_dim;
    const size_t stride = size_t(kv.kv_heads) * size_t(d);
    const Element* keys = static_cast<const Element*>(kv.keys) + size_t(kv_head) * size_t(d);
    const Element* values = static_cast<const Element*>(kv.values) + size_t(kv_head) * size_t(d);
    walk_slots(kv, block_table, first, count, [&](int j, size_t slot) {
        const Element* k = keys + slot * stride;
        if constexpr (std::is_same_v<Element, float>) scores[j] = dot(q, k, d) * scale;
        else scores[j] = dot_bf16(q, k, d) * scale;
    });
    softmax(scores, count);
    for (int i = 0; i < d; ++i) out[i] = 0.0f;
    walk_slots(kv, block_table, first, count, [&](int j, size_t slot) { add_scaled(out, scores[j], values + slot * stride, d); });
}

}  // namespace

void attention(const float* q, const PagedKv& kv, int kv_head, const int32_t* block_table, int first, int count,
               float scale, float* scores, float* out) {
    if (kv.type == KvType::F32) attend<float>(q, kv, kv_head, block_table, first, count, scale, scores, out);
    else attend<uint16_t>(q, kv, kv_head, block_table, first, count, scale, scores, out);
}

void attention_reference(const float* q, const float* keys, const float* values, int kv_heads, int head_dim,
                         int kv_head, int first, int count, float scale, float* out) {
    std::vector<double> weights(static_cast<size_t>(count));
    double largest = -INFINITY;
    for (int j = 0; j < count; ++j) {
        const float* k = keys + (size_t(first + j) * kv_heads + kv_head) * head_dim;
        double s = 0.0;
        for (int i = 0; i < head_dim; ++i) s += double(q[i]) * k[i];
        weights[j] = s * scale;
        largest = std::fmax(largest, weights[j]);
    }
    double total = 0.0;
    for (auto& w : weights) total += (w = std::exp(w - largest));
    for (int i = 0; i < head_dim; ++i) {
        double acc = 0.0;
        for (int j = 0; j < count; ++j)
            acc += weights[j] / total * values[(size_t(first + j) * kv_heads + kv_head) * head_dim + i];
        out[i] = float(acc);
    }
}

}  // namespace anvil::kernels
