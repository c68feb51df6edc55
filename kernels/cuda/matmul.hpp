// y = W x on the device, for the weight formats of kernels/weight_matrix.hpp with the same bytes:
// a WeightMatrix whose data (and scales, for Q8) point to device memory holding exactly what the
// host view holds (DeviceWeights uploads one).
//
// Two paths. Our own kernel streams each weight row once per call through 16-byte loads, one warp
// a row, for up to kMaxOwnTokens tokens at a time: at decode sizes the product is bound by memory
// and this is what reaches the copy bandwidth. cuBLAS (cublasGemmEx, f32 accumulation) takes bf16
// and f32 weights for larger batches, where reuse of each weight across tokens makes it bound by
// arithmetic; bf16 activations are rounded to bf16 for it (round to nearest even).
#pragma once

#include "kernels/cuda/device.hpp"
#include "kernels/weight_matrix.hpp"

namespace anvil::kernels::cuda {

// A weight matrix copied to the device, and its device view. With an uploader the copy goes
// through its pinned staging (queued: the uploader's finish() waits for it).
class DeviceWeights {
public:
    explicit DeviceWeights(const WeightMatrix& host, StagedUploader* uploader = nullptr);
    const WeightMatrix& view() const { return view_; }
    size_t bytes() const { return data_.bytes() + scales_.bytes(); }

private:
    DeviceArray<uint8_t> data_;
    DeviceArray<float> scales_;
    WeightMatrix view_;
};

constexpr int kMaxOwnTokens = 8;

enum class MatmulPath {
    Auto,    // our kernel up to kCublasFromTokens tokens (and always for Q8), cuBLAS beyond
    Own,     // our kernel, in chunks of kMaxOwnTokens tokens
    Cublas,  // cuBLAS; Q8 weights refuse it (std::invalid_argument)
};
constexpr int kCublasFromTokens = 9;

// x: device [n_tokens][w.cols] f32, y: device [n_tokens][w.rows] f32, w: a device view. Queued on
// the context's stream. Requirements, checked (std::invalid_argument): cols a multiple of 8 (bf16),
// 4 (f32) or 32 (q8); x, y and the weights 16-byte aligned.
void matmul(Context& context, const WeightMatrix& w, const float* x, int n_tokens, float* y,
            MatmulPath path = MatmulPath::Auto);

// f32 to bf16 bits on the device, rounded exactly as kernels::f32_to_bf16 does (nearest even, NaN
// kept, subnormals flushed to signed zero).
void f32_to_bf16(Context& context, const float* in, uint16_t* out, size_t n);

}  // namespace anvil::kernels::cuda
