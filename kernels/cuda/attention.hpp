// The paged KV cache on the device: writing a batch's keys and values into their slots, and
// attention of every query head of every token over its sequence's cached positions, with the
// semantics of kernels::attention and the engine's forward pass (grouped-query heads, causal up to
// the token's own position, optional sliding window). Prefill and decode tokens mix in one batch:
// each token attends to positions first .. its own, all of which must already be written.
#pragma once

#include <cstdint>

#include "kernels/attention.hpp"
#include "kernels/cuda/device.hpp"

namespace anvil::kernels::cuda {

// Where each token of a batch lives. Device pointers.
struct KvBatch {
    const int32_t* positions = nullptr;     // [n_tokens] position of each token in its sequence
    const int32_t* sequence = nullptr;      // [n_tokens] row of block_tables for each token
    const int32_t* block_tables = nullptr;  // [n_sequences][max_blocks] blocks in position order
    int max_blocks = 0;                     // row length of block_tables
};

// Stores each token's keys and values ([n_tokens][kv_heads * head_dim] f32) at its position's
// slot of one layer of the cache ([blocks][block_size][kv_heads][head_dim] of layer.type; bf16 is
// rounded as kernels::f32_to_bf16). keys and values: the layer's device memory.
void kv_write(Context& context, const PagedKv& layer, void* keys, void* values, const float* k, const float* v,
              int n_tokens, const KvBatch& batch);

// out[t][h] = softmax(scale * q[t][h] . k_j) . v_j over positions j = first .. positions[t] of the
// token's sequence, with kv head h / (n_heads / layer.kv_heads), first = max(0, position + 1 -
// sliding_window) when sliding_window > 0, else 0. q, out: [n_tokens][n_heads * head_dim].
// head_dim at most kMaxHeadDim.
constexpr int kMaxHeadDim = 256;
void attention(Context& context, const float* q, const PagedKv& layer, int n_tokens, int n_heads, const KvBatch& batch,
               int sliding_window, float scale, float* out);

}  // namespace anvil::kernels::cuda
