// The small per-token operations between the matrix products. Each works on one token's vector,
// so a token's result never depends on the rest of the batch.
#pragma once

#include <cstdint>

namespace anvil::kernels {

// out = x / sqrt(mean(x^2) + eps) * weight; out may alias x.
void rmsnorm(float* out, const float* x, const float* weight, int n, float eps);

// Rotates each head of `vec` ([n_heads][head_dim]) by the position's angles in the "rotate half"
// layout Hugging Face Llama uses: element i pairs with i + head_dim/2.
// cos/sin: [head_dim / 2] for this position.
void rope(float* vec, int n_heads, int head_dim, const float* cos, const float* sin);
// The same rotation in the layout GGUF files of the llama architecture hold q and k in (their
// rows permuted by the converter, as llama.cpp's "normal" rope expects): element 2i pairs with
// 2i + 1, at the angle of frequency i.
void rope_pairs(float* vec, int n_heads, int head_dim, const float* cos, const float* sin);

// In place, numerically stable.
void softmax(float* x, int n);

// gate = silu(gate) * up
void silu_mul(float* gate, const float* up, int n);

// x += y
void add(float* x, const float* y, int n);

float dot(const float* a, const float* b, int n);
// The same with b as bf16 bits.
float dot_bf16(const float* a, const uint16_t* b, int n);
// out[0..n) += p * v[0..n), v as floats or bf16 bits.
void add_scaled(float* out, float p, const float* v, int n);
void add_scaled(float* out, float p, const uint16_t* v, int n);

}  // namespace anvil::kernels
