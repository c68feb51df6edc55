// The per-token operations between the products, on the device: each is the kernels/ops.hpp (or
// engine) operation of the same name applied to every token of a batch. All pointers are device
// pointers; every call is queued on the context's stream.
#pragma once

#include <cstdint>

#include "kernels/attention.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/weight_matrix.hpp"

namespace anvil::kernels::cuda {

// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight for rows r < n_rows of n floats; out may alias
// x. Per-head norms (q_norm, k_norm) are rows of head_dim. With `rows` (device, [n_rows]) the input
// of out[r] is x[rows[r]] instead: the final norm of only the tokens whose logits are wanted.
void rmsnorm(Context& context, float* out, const float* x, const float* weight, int n_rows, int n, float eps,
             const int32_t* rows = nullptr);

// Rotates the heads of each token's vec ([n_tokens][stride], heads [n_heads][head_dim] from the
// start of each row) by its position's angles, "rotate half" layout as kernels::rope, or with
// `pairs` adjacent pairs as kernels::rope_pairs (GGUF's Llama tensors).
// positions: [n_tokens]; cos, sin: [max_context][head_dim / 2], the tables the engine computes.
void rope(Context& context, float* vec, int n_tokens, int stride, int n_heads, int head_dim, const int32_t* positions,
          const float* cos, const float* sin, bool pairs = false);

// gate = silu(gate) * up, n elements.
void silu_mul(Context& context, float* gate, const float* up, size_t n);

// x += y, n elements.
void add(Context& context, float* x, const float* y, size_t n);

// x[t] += bias for each of n_tokens rows of n.
void add_bias(Context& context, float* x, const float* bias, int n_tokens, int n);

// out[t] = row tokens[t] of the embedding (a device view in any weight format), dequantized as
// kernels::dequantize_row does.
void embedding(Context& context, const WeightMatrix& table, const int32_t* tokens, int n_tokens, float* out);

// out[r] = index of the largest of row r of logits ([n_rows][vocab]); ties go to the lowest index,
// as the CPU sampler's greedy choice. NaN is passed over (the CPU keeps index 0 when logits[0] is
// NaN); a row of NaN gives 0.
void argmax(Context& context, const float* logits, int n_rows, int vocab, int32_t* out);

}  // namespace anvil::kernels::cuda
