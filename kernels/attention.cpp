#include "kernels/attention.hpp"

#include <cmath>
#include <vector>

#include "kernels/ops.hpp"
#include "kernels/weight_matrix.hpp"

namespace anvil::kernels {
namespace {

template <typename Element>
const Element* slot_pointer(const void* base, const PagedKv& kv, const int32_t* block_table, int position,
                            int kv_head) {
    const size_t block = size_t(block_table[position / kv.block_size]);
    const size_t slot = block * kv.block_size + size_t(position % kv.block_size);
    return static_cast<const Element*>(base) + (slot * kv.kv_heads + kv_head) * kv.head_dim;
}

float dot_bf16(const float* q, const uint16_t* k, int n) {
    float sum = 0.0f;
    for (int i = 0; i < n; ++i) sum += q[i] * bf16_to_f32(k[i]);
    return sum;
}

}  // namespace

void attention(const float* q, const PagedKv& kv, int kv_head, const int32_t* block_table, int first, int count,
               float scale, float* scores, float* out) {
    const int d = kv.head_dim;
    for (int j = 0; j < count; ++j) {
        const int position = first + j;
        const float s = kv.type == KvType::F32
                            ? dot(q, slot_pointer<float>(kv.keys, kv, block_table, position, kv_head), d)
                            : dot_bf16(q, slot_pointer<uint16_t>(kv.keys, kv, block_table, position, kv_head), d);
        scores[j] = s * scale;
    }
    softmax(scores, count);
    for (int i = 0; i < d; ++i) out[i] = 0.0f;
    for (int j = 0; j < count; ++j) {
        const int position = first + j;
        const float p = scores[j];
        if (kv.type == KvType::F32) {
            const float* v = slot_pointer<float>(kv.values, kv, block_table, position, kv_head);
            for (int i = 0; i < d; ++i) out[i] += p * v[i];
        } else {
            const uint16_t* v = slot_pointer<uint16_t>(kv.values, kv, block_table, position, kv_head);
            for (int i = 0; i < d; ++i) out[i] += p * bf16_to_f32(v[i]);
        }
    }
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
