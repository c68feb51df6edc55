#include "kernels/attention.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/attention_avx512.hpp"
#include "kernels/avx2_math.hpp"
#include "kernels/cpu_features.hpp"
#include "kernels/ops.hpp"
#include "kernels/weight_matrix.hpp"

namespace anvil::kernels {
namespace {

// One head at a time, for head dimensions that are not whole vectors.
template <typename Element>
void attend(const float* q, const PagedKv& kv, int kv_head, const int32_t* block_table, int first, int count, float scale,
            float* scores, float* out) {
    const int d = kv.head_dim;
    const KvStrides s = strides_of(kv);
    const Element* keys = static_cast<const Element*>(kv.keys) + size_t(kv_head) * s.head;
    const Element* values = static_cast<const Element*>(kv.values) + size_t(kv_head) * s.head;
    walk_positions(kv, s, block_table, first, count, [&](int j, size_t at) {
        const Element* k = keys + at;
        if constexpr (std::is_same_v<Element, float>) scores[j] = dot(q, k, d) * scale;
        else scores[j] = dot_bf16(q, k, d) * scale;
    });
    softmax(scores, count);
    for (int i = 0; i < d; ++i) out[i] = 0.0f;
    walk_positions(kv, s, block_table, first, count, [&](int j, size_t at) { add_scaled(out, scores[j], values + at, d); });
}

#define ANVIL_UNROLL _Pragma("GCC unroll 16")

// Columns i .. i + 8W of N heads' value sums over one block's run of positions: the sums come
// from `out` and go back there, so each column is still one chain of fused multiply-adds over the
// positions in order (the floats of a walk over every position). Asks for the next run's line of
// each position (`next`, `next_run` positions; this chunk's columns) into L1 as it goes.
template <int N, int W, typename Element>
void weigh_run(const Element* rows, size_t stride, int run, const float* scores, int count, int i, const Element* next,
               int next_run, float* out, int d) {
    __m256 sum[N][W];
    ANVIL_UNROLL
    for (int h = 0; h < N; ++h)
        ANVIL_UNROLL
        for (int w = 0; w < W; ++w) sum[h][w] = _mm256_loadu_ps(out + h * d + i + 8 * w);
    for (int r = 0; r < run; ++r) {
        if (r < next_run) _mm_prefetch(reinterpret_cast<const char*>(next + size_t(r) * stride + i), _MM_HINT_T0);
        const Element* v = rows + size_t(r) * stride + i;
        __m256 vw[W];
        ANVIL_UNROLL
        for (int w = 0; w < W; ++w) vw[w] = load8(v + 8 * w);
        ANVIL_UNROLL
        for (int h = 0; h < N; ++h) {
            const __m256 p = _mm256_broadcast_ss(scores + size_t(h) * count + r);
            ANVIL_UNROLL
            for (int w = 0; w < W; ++w) sum[h][w] = _mm256_fmadd_ps(p, vw[w], sum[h][w]);
        }
    }
    ANVIL_UNROLL
    for (int h = 0; h < N; ++h)
        ANVIL_UNROLL
        for (int w = 0; w < W; ++w) _mm256_storeu_ps(out + h * d + i + 8 * w, sum[h][w]);
}

// out[h * d + i] = sum over positions j of scores[h * count + j] * v_j[i], for N heads and the
// columns from i0 on, 16 columns at a time (8 at the end): N heads' sums fill up to 8 of AVX2's 16
// registers. Block by block, each block's columns in turn: a walk over every position for each
// 16 columns read one line of each position, 256 bytes apart and scattered over the cache block
// by block, and waited on L2 or L3 line after line (its loads were a third of attention's
// samples); a block's rows are a few kilobytes side by side, asked for a block ahead.
template <int N, typename Element>
void weigh_values(const PagedKv& kv, const KvStrides& s, const int32_t* block_table, int first, const Element* values, int count,
                  int i0, const float* scores, float* out, int d) {
    for (int h = 0; h < N; ++h) std::fill(out + h * d + i0, out + h * d + d, 0.0f);
    int j = 0;
    while (j < count) {
        const int position = first + j;
        const int run = std::min(kv.block_size - position % kv.block_size, count - j);
        const Element* rows = values + position_offset(kv, s, block_table, position);
        const int next_run = std::min(kv.block_size, count - j - run);
        const Element* next = next_run > 0 ? values + position_offset(kv, s, block_table, position + run) : rows;
        int i = i0;
        for (; i + 16 <= d; i += 16) weigh_run<N, 2>(rows, s.position, run, scores + j, count, i, next, next_run, out, d);
        if (i < d) weigh_run<N, 1>(rows, s.position, run, scores + j, count, i, next, next_run, out, d);
        j += run;
    }
}

// N (1 to 4) query heads of one kv head, head_dim a multiple of 8: each key and value is read once
// for all of them, and the sums stay in registers across positions (the per-head kernel above
// called a dot product and an add to memory per position and head). A head's sums run over the
// positions in order, as there, so a token's result does not depend on the batch it is in.
template <int N, typename Element>
void attend_heads(const float* q, const PagedKv& kv, int kv_head, const int32_t* block_table, int first, int count,
                  float scale, float* scores, float* out) {
    const int d = kv.head_dim;
    const KvStrides s = strides_of(kv);
    const Element* keys = static_cast<const Element*>(kv.keys) + size_t(kv_head) * s.head;
    const Element* values = static_cast<const Element*>(kv.values) + size_t(kv_head) * s.head;
    static const bool wide = int(active_isa()) >= int(Isa::Avx512);
    if (wide && d % 16 == 0) score_keys_avx512(kv, s, block_table, first, keys, count, N, q, scale, scores);
    else walk_positions_ahead(kv, s, block_table, first, count, kAttentionPrefetch, [&](int j, size_t at, size_t ahead) {
        if (ahead != kNoPosition) {
            prefetch_head(keys + ahead, d);
            prefetch_head(values + ahead, d);
        }
        const Element* k = keys + at;
        __m256 sum[N][2];
        ANVIL_UNROLL
        for (int h = 0; h < N; ++h) sum[h][0] = sum[h][1] = _mm256_setzero_ps();
        int i = 0;
        for (; i + 16 <= d; i += 16) {
            const __m256 k0 = load8(k + i), k1 = load8(k + i + 8);
            ANVIL_UNROLL
            for (int h = 0; h < N; ++h) {
                sum[h][0] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * d + i), k0, sum[h][0]);
                sum[h][1] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * d + i + 8), k1, sum[h][1]);
            }
        }
        if (i < d) {
            const __m256 k0 = load8(k + i);
            ANVIL_UNROLL
            for (int h = 0; h < N; ++h) sum[h][0] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * d + i), k0, sum[h][0]);
        }
        ANVIL_UNROLL
        for (int h = 0; h < N; ++h) scores[size_t(h) * count + j] = horizontal_sum(_mm256_add_ps(sum[h][0], sum[h][1])) * scale;
    });
    for (int h = 0; h < N; ++h) softmax(scores + size_t(h) * count, count);
    // The AVX2 keys' pass above has asked for the values too; its values' pass asks only a block
    // ahead, into L1. Asking for the keys alone there was no faster (attention_ab f32 1.00-1.05x,
    // bf16 0.95x, against 0.96-0.99x for the same code on both sides), unlike at 512 bits. With
    // AVX-512, the N heads' sums of 16 columns a register fill up to 16 registers, so a head of 64
    // values takes them in one walk over the positions (attention_avx512.cpp; the same sums in the
    // same order, so the same floats).
    int i = 0;
    if (wide) i = weigh_values_avx512(kv, s, block_table, first, values, count, N, scores, out);
    if (i < d) weigh_values<N>(kv, s, block_table, first, values, count, i, scores, out, d);
}

template <typename Element>
void attend_group(const float* q, int heads, const PagedKv& kv, int kv_head, const int32_t* block_table, int first,
                  int count, float scale, float* scores, float* out) {
    const int d = kv.head_dim;
    if (d % 8 != 0) {
        for (int h = 0; h < heads; ++h)
            attend<Element>(q + h * d, kv, kv_head, block_table, first, count, scale, scores, out + h * d);
        return;
    }
    for (int h = 0; h < heads; h += 4) {
        const float* hq = q + h * d;
        float* hout = out + h * d;
        switch (std::min(4, heads - h)) {
            case 1: attend_heads<1, Element>(hq, kv, kv_head, block_table, first, count, scale, scores, hout); break;
            case 2: attend_heads<2, Element>(hq, kv, kv_head, block_table, first, count, scale, scores, hout); break;
            case 3: attend_heads<3, Element>(hq, kv, kv_head, block_table, first, count, scale, scores, hout); break;
            default: attend_heads<4, Element>(hq, kv, kv_head, block_table, first, count, scale, scores, hout); break;
        }
    }
}

}  // namespace

void attention(const float* q, const PagedKv& kv, int kv_head, const int32_t* block_table, int first, int count,
               float scale, float* scores, float* out) {
    attention_heads(q, 1, kv, kv_head, block_table, first, count, scale, scores, out);
}

void attention_heads(const float* q, int heads, const PagedKv& kv, int kv_head, const int32_t* block_table, int first,
                     int count, float scale, float* scores, float* out) {
    if (kv.type == KvType::F32) attend_group<float>(q, heads, kv, kv_head, block_table, first, count, scale, scores, out);
    else attend_group<uint16_t>(q, heads, kv, kv_head, block_table, first, count, scale, scores, out);
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
