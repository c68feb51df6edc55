// y = W x for a batch of tokens: the product that holds nearly all of the model's arithmetic.
//
// Every (row, token) dot product is summed in the same order whatever the batch size, the tile it
// falls in or the thread that computes it, so a token's result does not depend on what else is in
// the batch: greedy decoding gives the same tokens alone or batched.
#pragma once

#include "kernels/cpu_features.hpp"
#include "kernels/weight_matrix.hpp"

namespace anvil::kernels {

// x: [n_tokens][w.cols], y: [n_tokens][w.rows]. Runs on the OpenMP threads, split by output rows.
void matmul(const WeightMatrix& w, const float* x, int n_tokens, float* y);
// ys[i] = ws[i] x for up to kMaxMatmulGroup matrices that read the same input (q, k and v; gate
// and up), in one parallel region: one step where they are one format, or K-quants a level
// multiplies together (Q4_K and Q6_K), one step per run of such matrices otherwise. Each result is
// exactly what matmul() would give.
constexpr int kMaxMatmulGroup = 4;
void matmul_group(const WeightMatrix* ws, float* const* ys, int count, const float* x, int n_tokens);
// The same with one instruction-set level, for tests and benchmarks. Throws when the processor
// lacks it.
void matmul_with(Isa isa, const WeightMatrix& w, const float* x, int n_tokens, float* y);
void matmul_group_with(Isa isa, const WeightMatrix* ws, float* const* ys, int count, const float* x, int n_tokens);
// Whether `isa`'s integer products are the VNNI ones on this processor: the layouts the engine packs
// q8 and Q6_K weights into follow it (weight_matrix.hpp, ggml_blocks.hpp).
inline bool vnni_products(Isa isa) { return int(isa) >= int(Isa::Avx512Vnni) && cpu_features().avx512_vnni; }

namespace detail {
// The vector q8 products take the activations rounded to int8 with one scale per group, as the
// weights are (largest magnitude / 127, to nearest even): llama.cpp's q8_0 x q8_0. Each product of
// a group is then exact in integers; the price is half a step of the group's largest / 127.
struct QuantizedInput {
    const int8_t* values;  // [n_tokens][cols]
    const float* scales;   // [n_tokens][cols / kQ8Group]
    // [n_tokens][cols / kQ8Group]: -8 x each group's sum of values, packed Q4_0's offset of 8 (the
    // stored values are q + 8). int32, so that a tile broadcasts it straight from memory.
    const int32_t* less_8_sums = nullptr;
};
void quantize_input(const float* x, int n_tokens, int cols, int8_t* values, float* scales);
// The activations of the Q4_K and Q6_K products, rounded as llama.cpp's q8_K rounds them: int8 with
// one scale per 256 values (rounded as above), and the sum of each 16 of those int8 values, which
// takes the weights' offsets (Q4_K's mins, Q6_K's 32) out of the integer products.
struct SuperBlockInput {
    const int8_t* values;  // [n_tokens][cols]
    const float* scales;   // [n_tokens][cols / 256]
    const int16_t* sums;   // [n_tokens][cols / 16]
    const int16_t* sums32;  // [n_tokens][cols / 32]: Q4_K's sub-blocks
};
void quantize_input_super(const float* x, int n_tokens, int cols, int8_t* values, float* scales, int16_t* sums,
                          int16_t* sums32);

// The activations of the VNNI levels' q8 products (matmul_avx512vnni.cpp): int8, [n_tokens][cols],
// with [n_tokens][cols / kQ8Group] scales, rounded as QuantizedInput's.
struct Int8Input {
    const int8_t* values;
    const float* scales;
    const int32_t* offsets;  // [n_tokens][groups]: -128 x the group's sum of values (packed layout)
    int groups;
};

void matmul_reference(const WeightMatrix& w, const float* x, int n_tokens, float* y);
void matmul_avx2(const WeightMatrix* ws, float* const* ys, int count, const float* x, const QuantizedInput* qx,
                 int n_tokens);
// Q8Packed8 weights (any vector level): the AVX2 byte products on 8 rows at a time.
void matmul_avx2_packed8(const WeightMatrix* ws, float* const* ys, int count, const QuantizedInput* x, int n_tokens);
// GGUF blocks packed by 8 rows (Q4_0 with `q32`, Q4_K and Q6_K with `q256`): AVX2 below the VNNI
// levels (matmul_avx2_blocks.cpp), the VNNI dot product from them on (matmul_vnni_blocks.cpp).
void matmul_avx2_blocks(const WeightMatrix* ws, float* const* ys, int count, const QuantizedInput* q32,
                        const SuperBlockInput* q256, int n_tokens);
// With `amx`, whole runs of kAmxTokens tokens take the AMX tiles (the same bits).
void matmul_vnni_blocks(const WeightMatrix* ws, float* const* ys, int count, const QuantizedInput* q32,
                        const SuperBlockInput* q256, int n_tokens, bool amx = false);
void matmul_avx512(const WeightMatrix* ws, float* const* ys, int count, const float* x, const QuantizedInput* qx,
                   int n_tokens);
// q8 weights with the AVX-512 VNNI dot product; other formats go to matmul_avx512. With `amx`,
// whole runs of kAmxTokens tokens of packed q8 take the AMX tiles instead (the same bits).
void matmul_avx512vnni(const WeightMatrix* ws, float* const* ys, int count, const float* x, const QuantizedInput* qx,
                       int n_tokens, bool amx = false);
// Packed q8 (Q8Packed) block `block` (16 rows) times tokens t0..t1, a whole number of kAmxTokens,
// with the AMX int8 tiles (matmul_amx.cpp): for each token and row, bit for bit the VNNI tile's sum.
constexpr int kAmxTokens = 16;
// Where `amx` asks, the end of the whole runs of kAmxTokens tokens from c0 to c1: the AMX tiles
// take c0 up to it, the VNNI tiles the rest (c0 itself where there is no whole run).
constexpr int amx_tokens_end(bool amx, int c0, int c1) { return amx ? c0 + (c1 - c0) / kAmxTokens * kAmxTokens : c0; }
void amx_packed_block(const WeightMatrix& w, int block, const Int8Input* x, int t0, int t1, float* y);
// The same for Q4_0 packed by 8 rows (Q4_0Packed8): item `item`'s two 8-row blocks (packed8_items)
// unpacked to int8 once, then the tiles; bit for bit the VNNI Q4_0 tile's sums.
void amx_q4_0_item(const WeightMatrix& w, int item, const QuantizedInput* x, int t0, int t1, float* y);
// And Q4_K and Q6_K packed by 8 rows, bit for bit the VNNI tiles' sums.
void amx_q4_k_item(const WeightMatrix& w, int item, const SuperBlockInput* x, int t0, int t1, float* y);
void amx_q6_k_item(const WeightMatrix& w, int item, const SuperBlockInput* x, int t0, int t1, float* y);
// bf16 weights with the AVX-512 BF16 dot product; q8 to matmul_avx512vnni, f32 to matmul_avx512.
void matmul_avx512bf16(const WeightMatrix* ws, float* const* ys, int count, const float* x, const QuantizedInput* qx,
                       int n_tokens);
}  // namespace detail

}  // namespace anvil::kernels
