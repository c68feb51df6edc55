#include "kernels/cuda/attention.hpp"

#include <stdexcept>
#include <string>

#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/check.hpp"

namespace anvil::kernels::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kPerLane = kMaxHeadDim / 32;

__device__ __forceinline__ int slot_of(const KvBatch& batch, int token, int position, int block_size) {
    const int32_t* table = batch.block_tables + size_t(batch.sequence[token]) * batch.max_blocks;
    return table[position / block_size] * block_size + position % block_size;
}

__device__ __forceinline__ float load(KvType type, const void* base, size_t at) {
    return type == KvType::F32 ? static_cast<const float*>(base)[at]
                               : detail::bf16_bits_to_f32(static_cast<const uint16_t*>(base)[at]);
}

__global__ void kv_write_kernel(KvType type, void* keys, void* values, const float* __restrict__ k,
                                const float* __restrict__ v, int kv_dim, int block_size, KvBatch batch) {
    const int token = blockIdx.x;
    const size_t slot = size_t(slot_of(batch, token, batch.positions[token], block_size));
    for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
        const size_t at = slot * kv_dim + i;
        const float key = k[size_t(token) * kv_dim + i], value = v[size_t(token) * kv_dim + i];
        if (type == KvType::F32) {
            static_cast<float*>(keys)[at] = key;
            static_cast<float*>(values)[at] = value;
        } else {
            static_cast<uint16_t*>(keys)[at] = detail::f32_to_bf16_bits(key);
            static_cast<uint16_t*>(values)[at] = detail::f32_to_bf16_bits(value);
        }
    }
}

// One block per (head, token). Warp w takes tiles of kTile consecutive positions: first + w *
// kTile, then kWarps * kTile further on, and so on. A tile's keys are all loaded before any score is
// reduced, and its values before any is used, so that each warp keeps kTile rows in flight (a
// position at a time leaves the memory idle behind each reduction). Lane l holds elements l,
// l + 32, ... of the head. A running (online) softmax per warp; the warps merge at the end.
constexpr int kTile = 8;

__global__ void __launch_bounds__(kWarps * 32)
    attention_kernel(const float* __restrict__ q, PagedKv kv, int n_heads, KvBatch batch, int sliding_window, float scale,
                     float* __restrict__ out) {
    __shared__ float warp_max[kWarps], warp_total[kWarps];
    __shared__ float warp_acc[kWarps][kMaxHeadDim];
    const int head = blockIdx.x, token = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int hd = kv.head_dim;
    const int kv_head = head / (n_heads / kv.kv_heads);
    const int position = batch.positions[token];
    const int first = sliding_window > 0 ? max(0, position + 1 - sliding_window) : 0;
    const size_t q_dim = size_t(n_heads) * hd;

    float qv[kPerLane], acc[kPerLane];
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
        const int i = e * 32 + lane;
        qv[e] = i < hd ? q[token * q_dim + size_t(head) * hd + i] : 0.0f;
        acc[e] = 0.0f;
    }
    float running_max = -INFINITY, total = 0.0f;
    for (int tile = first + warp * kTile; tile <= position; tile += kWarps * kTile) {
        size_t base[kTile];
        float s[kTile];
#pragma unroll
        for (int u = 0; u < kTile; ++u) {
            const int j = tile + u;
            base[u] = j <= position ? (size_t(slot_of(batch, token, j, kv.block_size)) * kv.kv_heads + kv_head) * hd : 0;
        }
#pragma unroll
        for (int u = 0; u < kTile; ++u) {
            s[u] = 0.0f;
            if (tile + u > position) continue;
#pragma unroll
            for (int e = 0; e < kPerLane; ++e) {
                const int i = e * 32 + lane;
                if (i < hd) s[u] += qv[e] * load(kv.type, kv.keys, base[u] + i);
            }
        }
        float tile_max = -INFINITY;
#pragma unroll
        for (int u = 0; u < kTile; ++u) {
            for (int offset = 16; offset > 0; offset >>= 1) s[u] += __shfl_xor_sync(0xffffffffu, s[u], offset);
            s[u] *= scale;
            if (tile + u <= position) tile_max = fmaxf(tile_max, s[u]);
        }
        const float new_max = fmaxf(running_max, tile_max);
        const float correction = expf(running_max - new_max);  // 0 on the first tile
        float p[kTile];
#pragma unroll
        for (int u = 0; u < kTile; ++u) {
            p[u] = tile + u <= position ? expf(s[u] - new_max) : 0.0f;
            total = (u == 0 ? total * correction : total) + p[u];
        }
#pragma unroll
        for (int e = 0; e < kPerLane; ++e) {
            const int i = e * 32 + lane;
            if (i >= hd) continue;
            float sum = acc[e] * correction;
#pragma unroll
            for (int u = 0; u < kTile; ++u)
                if (tile + u <= position) sum += p[u] * load(kv.type, kv.values, base[u] + i);
            acc[e] = sum;
        }
        running_max = new_max;
    }
    if (lane == 0) {
        warp_max[warp] = running_max;
        warp_total[warp] = total;
    }
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
        const int i = e * 32 + lane;
        if (i < hd) warp_acc[warp][i] = acc[e];
    }
    __syncthreads();
    float overall = -INFINITY;
    for (int w = 0; w < kWarps; ++w) overall = fmaxf(overall, warp_max[w]);
    float weights[kWarps], sum = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
        // A warp that had no position (a short range) holds max -inf and total 0: weight 0.
        weights[w] = warp_total[w] > 0.0f ? expf(warp_max[w] - overall) : 0.0f;
        sum += warp_total[w] * weights[w];
    }
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < kWarps; ++w)
            if (weights[w] > 0.0f) o += warp_acc[w][i] * weights[w];
        out[token * q_dim + size_t(head) * hd + i] = o / sum;
    }
}

void check_layer(const char* what, const PagedKv& layer) {
    if (layer.block_size <= 0 || layer.kv_heads <= 0 || layer.head_dim <= 0 || layer.head_dim > kMaxHeadDim)
        throw std::invalid_argument(std::string("cuda ") + what +
                                    ": block_size and kv_heads positive, head_dim 1 to " + std::to_string(kMaxHeadDim));
    if (layer.layout != KvLayout::SlotMajor)
        throw std::invalid_argument(std::string("cuda ") + what + ": the device cache is slot-major (KvLayout::SlotMajor)");
}

}  // namespace

void kv_write(Context& context, const PagedKv& layer, void* keys, void* values, const float* k, const float* v,
              int n_tokens, const KvBatch& batch) {
    check_layer("kv_write", layer);
    if (n_tokens < 0) throw std::invalid_argument("cuda kv_write: negative n_tokens");
    if (n_tokens == 0) return;
    context.activate();
    kv_write_kernel<<<unsigned(n_tokens), 256, 0, detail::stream_of(context)>>>(
        layer.type, keys, values, k, v, layer.kv_heads * layer.head_dim, layer.block_size, batch);
    ANVIL_CUDA_CHECK_LAUNCH("kv_write_kernel");
}

void attention(Context& context, const float* q, const PagedKv& layer, int n_tokens, int n_heads, const KvBatch& batch,
               int sliding_window, float scale, float* out) {
    check_layer("attention", layer);
    if (n_tokens < 0 || n_heads <= 0 || n_heads % layer.kv_heads != 0)
        throw std::invalid_argument("cuda attention: n_heads must be a positive multiple of kv_heads (" +
                                    std::to_string(n_heads) + " for " + std::to_string(layer.kv_heads) + ")");
    if (n_tokens == 0) return;
    if (n_tokens > 65535) throw std::invalid_argument("cuda attention: at most 65535 tokens a call");
    context.activate();
    attention_kernel<<<dim3(unsigned(n_heads), unsigned(n_tokens)), kWarps * 32, 0, detail::stream_of(context)>>>(
        q, layer, n_heads, batch, sliding_window, scale, out);
    ANVIL_CUDA_CHECK_LAUNCH("attention_kernel");
}

}  // namespace anvil::kernels::cuda
