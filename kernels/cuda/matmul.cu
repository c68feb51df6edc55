#include "kernels/cuda/matmul.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/check.hpp"

namespace anvil::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;  // rows per block: one warp a row
constexpr int kUnroll = 4;         // 16-byte loads each lane has in flight per token-independent step

// Elements of each format in one 16-byte load.
template <WeightType Type>
constexpr int kPerLoad = Type == WeightType::F32 ? 4 : Type == WeightType::BF16 ? 8 : 16;

// The dot product of one 16-byte chunk of a weight row (at element k) with x[k .. k + kPerLoad).
template <WeightType Type>
__device__ __forceinline__ float chunk_dot(uint4 w, const float* x, const float* scales, int k) {
    const float4* x4 = reinterpret_cast<const float4*>(x + k);
    if constexpr (Type == WeightType::F32) {
        const float4 a = __ldg(x4);
        return __uint_as_float(w.x) * a.x + __uint_as_float(w.y) * a.y + __uint_as_float(w.z) * a.z +
               __uint_as_float(w.w) * a.w;
    } else if constexpr (Type == WeightType::BF16) {
        const float4 a = __ldg(x4), b = __ldg(x4 + 1);
        float sum = detail::bf16_low(w.x) * a.x;
        sum += detail::bf16_high(w.x) * a.y;
        sum += detail::bf16_low(w.y) * a.z;
        sum += detail::bf16_high(w.y) * a.w;
        sum += detail::bf16_low(w.z) * b.x;
        sum += detail::bf16_high(w.z) * b.y;
        sum += detail::bf16_low(w.w) * b.z;
        sum += detail::bf16_high(w.w) * b.w;
        return sum;
    } else {
        // 16 int8 weights, all in the group k / kQ8Group (k is a multiple of 16, a group is 32).
        const uint32_t words[4] = {w.x, w.y, w.z, w.w};
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float4 a = __ldg(x4 + i);
            sum += float(int8_t(words[i] & 0xff)) * a.x;
            sum += float(int8_t((words[i] >> 8) & 0xff)) * a.y;
            sum += float(int8_t((words[i] >> 16) & 0xff)) * a.z;
            sum += float(int8_t(words[i] >> 24)) * a.w;
        }
        return sum * __ldg(scales + k / kQ8Group);
    }
}

__device__ __forceinline__ float warp_sum(float value) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;
}

// y[t][row] = W[row] . x[t] for t < n_tokens <= Tokens. One warp a row; lane l reads the 16-byte
// chunks l, l + 32, l + 64, ... of the row, kUnroll of them before using any, so that enough loads
// are in flight to keep the memory busy.
template <WeightType Type, int Tokens>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    matvec_kernel(const uint8_t* __restrict__ w, const float* __restrict__ scales, int rows, int cols,
                  const float* __restrict__ x, int n_tokens, float* __restrict__ y) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
    if (row >= rows) return;
    constexpr int per_load = kPerLoad<Type>;
    constexpr int element_bytes = Type == WeightType::F32 ? 4 : Type == WeightType::BF16 ? 2 : 1;
    const uint4* row_chunks = reinterpret_cast<const uint4*>(w + size_t(row) * cols * element_bytes);
    const float* row_scales = Type == WeightType::Q8 ? scales + size_t(row) * (cols / kQ8Group) : nullptr;
    const int chunks = cols / per_load;

    float acc[Tokens];
#pragma unroll
    for (int t = 0; t < Tokens; ++t) acc[t] = 0.0f;

    for (int base = lane; base < chunks; base += 32 * kUnroll) {
        uint4 loaded[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int chunk = base + u * 32;
            // Streamed once per call: do not let the weights push the activations out of L1.
            loaded[u] = chunk < chunks ? __ldcs(row_chunks + chunk) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int chunk = base + u * 32;
            if (chunk >= chunks) break;
            const int k = chunk * per_load;
#pragma unroll
            for (int t = 0; t < Tokens; ++t)
                if (t < n_tokens) acc[t] += chunk_dot<Type>(loaded[u], x + size_t(t) * cols, row_scales, k);
        }
    }
#pragma unroll
    for (int t = 0; t < Tokens; ++t) {
        if (t >= n_tokens) break;
        const float sum = warp_sum(acc[t]);
        if (lane == 0) y[size_t(t) * rows + row] = sum;
    }
}

template <WeightType Type>
void launch_own(const Context& context, const WeightMatrix& w, const float* x, int n_tokens, float* y) {
    const dim3 grid(unsigned((w.rows + kWarpsPerBlock - 1) / kWarpsPerBlock));
    const dim3 block(kWarpsPerBlock * 32);
    const cudaStream_t stream = detail::stream_of(context);
    const auto* data = static_cast<const uint8_t*>(w.data);
    for (int first = 0; first < n_tokens; first += kMaxOwnTokens) {
        const int n = std::min(kMaxOwnTokens, n_tokens - first);
        const float* xs = x + size_t(first) * w.cols;
        float* ys = y + size_t(first) * w.rows;
        if (n == 1)
            matvec_kernel<Type, 1><<<grid, block, 0, stream>>>(data, w.scales, w.rows, w.cols, xs, n, ys);
        else if (n == 2)
            matvec_kernel<Type, 2><<<grid, block, 0, stream>>>(data, w.scales, w.rows, w.cols, xs, n, ys);
        else if (n <= 4)
            matvec_kernel<Type, 4><<<grid, block, 0, stream>>>(data, w.scales, w.rows, w.cols, xs, n, ys);
        else
            matvec_kernel<Type, 8><<<grid, block, 0, stream>>>(data, w.scales, w.rows, w.cols, xs, n, ys);
        ANVIL_CUDA_CHECK_LAUNCH("matvec_kernel");
    }
}

__global__ void f32_to_bf16_kernel(const float* __restrict__ in, uint16_t* __restrict__ out, size_t n) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        out[i] = detail::f32_to_bf16_bits(in[i]);
}

void launch_f32_to_bf16(const Context& context, const float* in, uint16_t* out, size_t n) {
    if (n == 0) return;
    const unsigned blocks = unsigned(std::min<size_t>((n + 255) / 256, 65535));
    f32_to_bf16_kernel<<<blocks, 256, 0, detail::stream_of(context)>>>(in, out, n);
    ANVIL_CUDA_CHECK_LAUNCH("f32_to_bf16_kernel");
}

// Row-major W [rows][cols] is column-major W^T with leading dimension cols, and row-major
// x [n][cols] / y [n][rows] are column-major [cols][n] / [rows][n]: y = op_T(W^T) x.
void launch_cublas(Context& context, const WeightMatrix& w, const float* x, int n_tokens, float* y) {
    const auto handle = static_cast<cublasHandle_t>(context.cublas());
    const float one = 1.0f, zero = 0.0f;
    const void* b = x;
    cudaDataType_t type = CUDA_R_32F;
    if (w.type == WeightType::BF16) {
        const size_t n = size_t(n_tokens) * w.cols;
        auto* bf16 = static_cast<uint16_t*>(context.scratch(n * sizeof(uint16_t)));
        launch_f32_to_bf16(context, x, bf16, n);
        b = bf16;
        type = CUDA_R_16BF;
    }
    ANVIL_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, w.rows, n_tokens, w.cols, &one, w.data, type,
                                    w.cols, b, type, w.cols, &zero, y, CUDA_R_32F, w.rows, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
}

bool aligned16(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; }

void check_shapes(const WeightMatrix& w, const float* x, int n_tokens, const float* y) {
    if (w.type == WeightType::Q8Packed || w.type == WeightType::Q8Packed8)
        throw std::invalid_argument("cuda matmul: packed q8 is a CPU layout; give the row-major q8 matrix");
    if (is_ggml_block_type(w.type) || w.type == WeightType::F16)
        throw std::invalid_argument(std::string("cuda matmul: ") + weight_type_name(w.type) + " weights have no CUDA kernel yet");
    const int multiple = w.type == WeightType::F32 ? 4 : w.type == WeightType::BF16 ? 8 : kQ8Group;
    const std::string what = std::string("cuda matmul of a ") + weight_type_name(w.type) + " [" +
                             std::to_string(w.rows) + "][" + std::to_string(w.cols) + "] matrix: ";
    if (w.rows <= 0 || w.cols <= 0 || n_tokens < 0)
        throw std::invalid_argument(what + "rows, cols must be positive and n_tokens not negative");
    if (w.cols % multiple != 0)
        throw std::invalid_argument(what + "cols must be a multiple of " + std::to_string(multiple));
    if (!w.data || (w.type == WeightType::Q8 && !w.scales))
        throw std::invalid_argument(what + "no device data (or no scales for q8)");
    if (!aligned16(w.data) || !aligned16(x) || !aligned16(y))
        throw std::invalid_argument(what + "weights, x and y must be 16-byte aligned");
}

}  // namespace

DeviceWeights::DeviceWeights(const WeightMatrix& host, StagedUploader* uploader) : view_(host) {
    if (host.type == WeightType::Q8Packed || host.type == WeightType::Q8Packed8)
        throw std::invalid_argument("cuda weights: packed q8 is a CPU layout; upload the row-major q8 matrix");
    if (host.type != WeightType::F32 && host.type != WeightType::BF16 && host.type != WeightType::Q8)
        throw std::invalid_argument(std::string("cuda weights: ") + weight_type_name(host.type) + " has no CUDA kernel yet");
    const size_t count = size_t(host.rows) * host.cols;
    const size_t element = host.type == WeightType::F32 ? 4 : host.type == WeightType::BF16 ? 2 : 1;
    const auto upload = [&](void* dst, const void* src, size_t bytes) {
        if (uploader) uploader->upload(dst, src, bytes);
        else detail::copy_to_device(dst, src, bytes);
    };
    data_ = DeviceArray<uint8_t>(count * element);
    upload(data_.data(), host.data, count * element);
    view_.data = data_.data();
    view_.scales = nullptr;
    if (host.type == WeightType::Q8) {
        scales_ = DeviceArray<float>(count / kQ8Group);
        upload(scales_.data(), host.scales, count / kQ8Group * sizeof(float));
        view_.scales = scales_.data();
    }
}

void matmul(Context& context, const WeightMatrix& w, const float* x, int n_tokens, float* y, MatmulPath path) {
    check_shapes(w, x, n_tokens, y);
    if (n_tokens == 0) return;
    if (path == MatmulPath::Cublas && w.type == WeightType::Q8)
        throw std::invalid_argument("cuda matmul: cuBLAS takes f32 and bf16 weights, not q8");
    context.activate();
    const bool cublas =
        path == MatmulPath::Cublas || (path == MatmulPath::Auto && w.type != WeightType::Q8 && n_tokens >= kCublasFromTokens);
    if (cublas) return launch_cublas(context, w, x, n_tokens, y);
    switch (w.type) {
        case WeightType::F32: return launch_own<WeightType::F32>(context, w, x, n_tokens, y);
        case WeightType::BF16: return launch_own<WeightType::BF16>(context, w, x, n_tokens, y);
        case WeightType::Q8: return launch_own<WeightType::Q8>(context, w, x, n_tokens, y);
        case WeightType::F16:
        case WeightType::Q8Packed:
        case WeightType::Q8Packed8:
        case WeightType::Q4_0:
        case WeightType::Q4_K:
        case WeightType::Q6_K:
        case WeightType::Q4_KPacked8:
        case WeightType::Q6_KPacked8:
        case WeightType::Q4_0Packed8:
        case WeightType::Q6_KPacked8Avx2: break;  // refused by check_shapes
    }
}

void f32_to_bf16(Context& context, const float* in, uint16_t* out, size_t n) {
    context.activate();
    launch_f32_to_bf16(context, in, out, n);
}

}  // namespace anvil::kernels::cuda
