// The paged KV cache: one pool of fixed-size blocks per layer, shared by every sequence. Which
// block belongs to whom is the block manager's business; this only owns the memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/attention.hpp"
#include "kernels/streamed_memory.hpp"

namespace anvil::engine {

kernels::KvType parse_kv_type(const std::string& text);  // f32 | bf16
const char* kv_type_name(kernels::KvType type);

class KvCache {
public:
    KvCache(kernels::KvType type, int n_layers, int n_blocks, int block_size, int kv_heads, int head_dim);
    KvCache(const KvCache&) = delete;
    KvCache& operator=(const KvCache&) = delete;

    kernels::KvType type() const { return type_; }
    int n_blocks() const { return n_blocks_; }
    int block_size() const { return block_size_; }
    size_t bytes() const { return bytes_; }

    kernels::PagedKv layer(int layer) const;
    // Stores one token's keys and values ([kv_heads * head_dim] each) at block/slot of a layer.
    void write(int layer, int block, int slot, const float* keys, const float* values);
    // The same for kv heads first..first + count - 1 only (keys and values still the whole token's).
    void write_heads(int layer, int block, int slot, int first, int count, const float* keys, const float* values);

private:
    uint8_t* head_pointer(uint8_t* base, int layer, int block, int head, int slot) const;

    kernels::KvType type_;
    int n_blocks_, block_size_, kv_heads_, head_dim_;
    size_t element_size_, layer_bytes_, bytes_;
    // [layers][blocks][kv_heads][block_size][head_dim] (kernels::KvLayout::HeadMajor), on huge pages
    kernels::StreamedBuffer keys_;
    kernels::StreamedBuffer values_;  // the same
};

}  // namespace anvil::engine
