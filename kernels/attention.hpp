// Attention of one query head over a sequence's keys and values in the paged KV cache.
#pragma once

#include <cstdint>

namespace anvil::kernels {

enum class KvType { F32, BF16 };

// Where a block keeps its positions' heads:
// - SlotMajor: [block_size][kv_heads][head_dim], a position's heads side by side (the CUDA cache).
// - HeadMajor: [kv_heads][block_size][head_dim], one kv head's positions side by side (the CPU
//   engine's KvCache). Attention reads one kv head at a time, so here it reads runs of block_size
//   x head_dim elements rather than head_dim at a stride of kv_heads x head_dim: decode attention of
//   the bench model at 2000 positions, two threads, cache read cold, went from 16 to 27-31 GB/s
//   (f32) and from 11 to 25 GB/s (bf16) (docs/PERFORMANCE.md, "KV cache layout").
enum class KvLayout { SlotMajor, HeadMajor };

// One layer of the cache: keys and values each [blocks][...] of `type`, each block laid out as
// `layout` says.
struct PagedKv {
    KvType type = KvType::F32;
    const void* keys = nullptr;
    const void* values = nullptr;
    int block_size = 0;
    int kv_heads = 0;
    int head_dim = 0;
    KvLayout layout = KvLayout::SlotMajor;
};

// out[head_dim] = softmax(scale * q . k_j) . v_j over positions first .. first+count-1 of the
// sequence whose j-th position lives in block block_table[j / block_size], slot j % block_size.
// scores: scratch of at least `count` floats.
void attention(const float* q, const PagedKv& kv, int kv_head, const int32_t* block_table, int first, int count,
               float scale, float* scores, float* out);

// The same for `heads` query heads that share kv_head (grouped-query attention), their queries
// and outputs each [heads][head_dim]: up to four heads read each key and value once together.
// scores: scratch of at least min(heads, 4) * count floats.
void attention_heads(const float* q, int heads, const PagedKv& kv, int kv_head, const int32_t* block_table, int first,
                     int count, float scale, float* scores, float* out);

// The same with the keys and values laid out contiguously ([positions][kv_heads][head_dim]) and
// computed plainly in double: the reference the paged kernel is checked against.
void attention_reference(const float* q, const float* keys, const float* values, int kv_heads, int head_dim,
                         int kv_head, int first, int count, float scale, float* out);

}  // namespace anvil::kernels
