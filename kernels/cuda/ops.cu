#include "kernels/cuda/ops.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/check.hpp"

namespace anvil::kernels::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(size_t n) { return unsigned(std::min<size_t>((n + kThreads - 1) / kThreads, 1u << 16)); }

__device__ __forceinline__ float block_sum(float value, float* shared /* [32] */) {
    for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) shared[warp] = value;
    __syncthreads();
    const int warps = (blockDim.x + 31) >> 5;
    value = lane < warps ? shared[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;  // every thread holds the total
}

__global__ void rmsnorm_kernel(float* out, const float* x, const float* __restrict__ weight, int n, float eps,
                               const int32_t* __restrict__ rows) {
    __shared__ float partial[32];
    const float* row = x + size_t(rows ? rows[blockIdx.x] : int(blockIdx.x)) * n;
    float* dst = out + size_t(blockIdx.x) * n;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) sum += row[i] * row[i];
    const float mean_square = block_sum(sum, partial) / float(n);
    const float inverse = 1.0f / sqrtf(mean_square + eps);
    // Every thread has read its elements of the row before any writes (out may alias x): a thread
    // writes only the elements it read itself.
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = __fmul_rn(row[i], inverse) * weight[i];
}

// One block a token; thread i rotates pair i of some head.
__global__ void rope_kernel(float* vec, int stride, int n_heads, int half, const int32_t* __restrict__ positions,
                            const float* __restrict__ cos, const float* __restrict__ sin, bool pairs) {
    float* row = vec + size_t(blockIdx.x) * stride;
    const size_t table = size_t(positions[blockIdx.x]) * half;
    for (int j = threadIdx.x; j < n_heads * half; j += blockDim.x) {
        const int head = j / half, i = j % half;
        float* h = row + size_t(head) * 2 * half;
        // The pair rotated by angle i: (i, i + half), or (2i, 2i + 1) for the adjacent layout.
        const int first = pairs ? 2 * i : i, second = pairs ? 2 * i + 1 : i + half;
        const float a = h[first], b = h[second], c = cos[table + i], s = sin[table + i];
        // Each product rounded, as the CPU computes them (no fused multiply-add).
        h[first] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
        h[second] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
    }
}

__global__ void silu_mul_kernel(float* gate, const float* __restrict__ up, size_t n) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        const float g = gate[i];
        gate[i] = __fmul_rn(g / (1.0f + expf(-g)), up[i]);
    }
}

__global__ void add_kernel(float* x, const float* __restrict__ y, size_t n) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        x[i] += y[i];
}

__global__ void add_bias_kernel(float* x, const float* __restrict__ bias, int n) {
    float* row = x + size_t(blockIdx.x) * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) row[i] += bias[i];
}

__global__ void embedding_kernel(WeightType type, const void* __restrict__ data, const float* __restrict__ scales,
                                 int cols, const int32_t* __restrict__ tokens, float* out) {
    const size_t row = size_t(tokens[blockIdx.x]);
    float* dst = out + size_t(blockIdx.x) * cols;
    for (int k = threadIdx.x; k < cols; k += blockDim.x) {
        const size_t at = row * cols + k;
        if (type == WeightType::F32)
            dst[k] = static_cast<const float*>(data)[at];
        else if (type == WeightType::BF16)
            dst[k] = detail::bf16_bits_to_f32(static_cast<const uint16_t*>(data)[at]);
        else
            dst[k] = float(static_cast<const int8_t*>(data)[at]) * scales[row * (cols / kQ8Group) + k / kQ8Group];
    }
}

// (a, ia) beats (b, ib): larger, or equal and earlier. Index -1 is "none yet", beaten by anything.
__device__ __forceinline__ bool beats(float a, int ia, float b, int ib) {
    return ia >= 0 && (ib < 0 || a > b || (a == b && ia < ib));
}

__device__ __forceinline__ void warp_best(float& best, int& index) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, best, offset);
        const int other_index = __shfl_xor_sync(0xffffffffu, index, offset);
        if (beats(other, other_index, best, index)) {
            best = other;
            index = other_index;
        }
    }
}

// One block a row. NaN elements are passed over; a row of NaN gives 0.
__global__ void argmax_kernel(const float* __restrict__ logits, int vocab, int32_t* out) {
    __shared__ float best_values[32];
    __shared__ int best_indices[32];
    const float* row = logits + size_t(blockIdx.x) * vocab;
    float best = 0.0f;
    int index = -1;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float value = row[i];
        if (!isnan(value) && beats(value, i, best, index)) {
            best = value;
            index = i;
        }
    }
    warp_best(best, index);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) {
        best_values[warp] = best;
        best_indices[warp] = index;
    }
    __syncthreads();
    if (warp == 0) {
        const int warps = blockDim.x >> 5;
        best = lane < warps ? best_values[lane] : 0.0f;
        index = lane < warps ? best_indices[lane] : -1;
        warp_best(best, index);
        if (lane == 0) out[blockIdx.x] = index < 0 ? 0 : index;
    }
}

void check_count(const char* what, long long count) {
    if (count < 0) throw std::invalid_argument(std::string("cuda ") + what + ": negative size");
}

}  // namespace

void rmsnorm(Context& context, float* out, const float* x, const float* weight, int n_rows, int n, float eps,
             const int32_t* rows) {
    check_count("rmsnorm", n_rows);
    if (n <= 0) throw std::invalid_argument("cuda rmsnorm: rows of at least one element");
    if (n_rows == 0) return;
    context.activate();
    rmsnorm_kernel<<<unsigned(n_rows), kThreads, 0, detail::stream_of(context)>>>(out, x, weight, n, eps, rows);
    ANVIL_CUDA_CHECK_LAUNCH("rmsnorm_kernel");
}

void rope(Context& context, float* vec, int n_tokens, int stride, int n_heads, int head_dim, const int32_t* positions,
          const float* cos, const float* sin, bool pairs) {
    check_count("rope", n_tokens);
    if (head_dim <= 0 || head_dim % 2 != 0 || n_heads <= 0 || stride < n_heads * head_dim)
        throw std::invalid_argument("cuda rope: head_dim even and positive, n_heads positive, rows hold the heads");
    if (n_tokens == 0) return;
    context.activate();
    rope_kernel<<<unsigned(n_tokens), kThreads, 0, detail::stream_of(context)>>>(vec, stride, n_heads, head_dim / 2,
                                                                                  positions, cos, sin, pairs);
    ANVIL_CUDA_CHECK_LAUNCH("rope_kernel");
}

void silu_mul(Context& context, float* gate, const float* up, size_t n) {
    if (n == 0) return;
    context.activate();
    silu_mul_kernel<<<blocks_for(n), kThreads, 0, detail::stream_of(context)>>>(gate, up, n);
    ANVIL_CUDA_CHECK_LAUNCH("silu_mul_kernel");
}

void add(Context& context, float* x, const float* y, size_t n) {
    if (n == 0) return;
    context.activate();
    add_kernel<<<blocks_for(n), kThreads, 0, detail::stream_of(context)>>>(x, y, n);
    ANVIL_CUDA_CHECK_LAUNCH("add_kernel");
}

void add_bias(Context& context, float* x, const float* bias, int n_tokens, int n) {
    check_count("add_bias", n_tokens);
    if (n_tokens == 0 || n <= 0) return;
    context.activate();
    add_bias_kernel<<<unsigned(n_tokens), kThreads, 0, detail::stream_of(context)>>>(x, bias, n);
    ANVIL_CUDA_CHECK_LAUNCH("add_bias_kernel");
}

void embedding(Context& context, const WeightMatrix& table, const int32_t* tokens, int n_tokens, float* out) {
    check_count("embedding", n_tokens);
    if (table.type == WeightType::Q8Packed || table.type == WeightType::Q8Packed8)
        throw std::invalid_argument("cuda embedding: packed q8 is a CPU layout; give the row-major q8 table");
    if (table.type == WeightType::Q8 && (table.cols % kQ8Group != 0 || !table.scales))
        throw std::invalid_argument("cuda embedding: a q8 table needs cols a multiple of 32 and scales");
    if (table.type != WeightType::F32 && table.type != WeightType::BF16 && table.type != WeightType::Q8)
        throw std::invalid_argument(std::string("cuda embedding: a ") + weight_type_name(table.type) + " table has no CUDA kernel yet");
    if (n_tokens == 0) return;
    context.activate();
    embedding_kernel<<<unsigned(n_tokens), kThreads, 0, detail::stream_of(context)>>>(table.type, table.data,
                                                                                       table.scales, table.cols, tokens, out);
    ANVIL_CUDA_CHECK_LAUNCH("embedding_kernel");
}

void argmax(Context& context, const float* logits, int n_rows, int vocab, int32_t* out) {
    check_count("argmax", n_rows);
    if (vocab <= 0) throw std::invalid_argument("cuda argmax: an empty vocabulary");
    if (n_rows == 0) return;
    context.activate();
    argmax_kernel<<<unsigned(n_rows), 1024, 0, detail::stream_of(context)>>>(logits, vocab, out);
    ANVIL_CUDA_CHECK_LAUNCH("argmax_kernel");
}

}  // namespace anvil::kernels::cuda
