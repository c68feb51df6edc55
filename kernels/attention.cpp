#include "kernels/attention.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/ops.hpp"
#include "kernels/weight_matrix.hpp"

namespace anvil::kernels {
namespace {

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
