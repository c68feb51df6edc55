#include "engine/kv_cache.hpp"

#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "kernels/convert.hpp"

namespace anvil::engine {

kernels::KvType parse_kv_type(const std::string& text) {
    if (text == "f32") return kernels::KvType::F32;
    if (text == "bf16") return kernels::KvType::BF16;
    throw std::runtime_error("--kv-dtype " + text + ": expected f32 or bf16");
}

const char* kv_type_name(kernels::KvType type) { return type == kernels::KvType::F32 ? "f32" : "bf16"; }

namespace {
// Attention reads a sequence's keys and values every token, as decode reads the weights: huge
// pages for the same reason (kernels/streamed_memory.hpp).
kernels::StreamedBuffer allocate_zeroed(size_t bytes) {
    kernels::StreamedBuffer p = kernels::allocate_streamed(bytes);
    if (!p) throw std::runtime_error("cannot allocate the KV cache (" + std::to_string(bytes >> 20) +
                                     " MB): lower --max-seqs or --max-context");
    std::memset(p.get(), 0, bytes);
    return p;
}
}  // namespace

KvCache::KvCache(kernels::KvType type, int n_layers, int n_blocks, int block_size, int kv_heads, int head_dim)
    : type_(type),
      n_blocks_(n_blocks),
      block_size_(block_size),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      element_size_(type == kernels::KvType::F32 ? 4 : 2),
      layer_bytes_(size_t(n_blocks) * block_size * kv_heads * head_dim * element_size_),
      bytes_(2 * layer_bytes_ * n_layers),
      keys_(allocate_zeroed(layer_bytes_ * n_layers)),
      values_(allocate_zeroed(layer_bytes_ * n_layers)) {}

kernels::PagedKv KvCache::layer(int layer) const {
    kernels::PagedKv kv;
    kv.type = type_;
    kv.keys = keys_.get() + layer_bytes_ * layer;
    kv.values = values_.get() + layer_bytes_ * layer;
    kv.block_size = block_size_;
    kv.kv_heads = kv_heads_;
    kv.head_dim = head_dim_;
    kv.layout = kernels::KvLayout::HeadMajor;
    return kv;
}

uint8_t* KvCache::head_pointer(uint8_t* base, int layer, int block, int head, int slot) const {
    const size_t row = (size_t(block) * kv_heads_ + size_t(head)) * block_size_ + size_t(slot);
    return base + layer_bytes_ * layer + row * head_dim_ * element_size_;
}

void KvCache::write(int layer, int block, int slot, const float* keys, const float* values) {
    write_heads(layer, block, slot, 0, kv_heads_, keys, values);
}

void KvCache::write_heads(int layer, int block, int slot, int first, int count, const float* keys, const float* values) {
    const size_t d = size_t(head_dim_);
    for (int h = first; h < first + count; ++h) {
        uint8_t* k = head_pointer(keys_.get(), layer, block, h, slot);
        uint8_t* v = head_pointer(values_.get(), layer, block, h, slot);
        if (type_ == kernels::KvType::F32) {
            std::memcpy(k, keys + h * d, d * 4);
            std::memcpy(v, values + h * d, d * 4);
        } else {
            kernels::f32_to_bf16_array(keys + h * d, reinterpret_cast<uint16_t*>(k), d);
            kernels::f32_to_bf16_array(values + h * d, reinterpret_cast<uint16_t*>(v), d);
        }
    }
}

}  // namespace anvil::engine
