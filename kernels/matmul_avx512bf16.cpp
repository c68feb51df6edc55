// Products of bf16 weights with the AVX-512 BF16 dot product. The activations are rounded to bf16
// once per product (round to nearest even, the conversion instruction's rounding) and each
// vdpbf16ps multiplies 32 weight/activation pairs and adds them, pairwise, into 16 f32 lanes.
// Widening every weight to f32 first (matmul_avx512.cpp) takes about three times the instructions
// per byte, which is what held bf16 decode below the memory bandwidth. The price is the
// activations' rounding, 2^-8 of each at most: the same order as the bf16 weights' own.
// Compiled with -mavx512bf16; called only when the processor has it.
#include <immintrin.h>

#include <cstdint>
#include <vector>

#include "kernels/convert.hpp"
#include "kernels/matmul.hpp"
#include "kernels/matmul_tiling.hpp"

// The accumulators must live in registers (see matmul_avx512.cpp).
#define ANVIL_UNROLL _Pragma("GCC unroll 16")

namespace anvil::kernels::detail {
namespace {

constexpr int kPairs = 32;  // bf16 values in one 512-bit vector

inline __m512bh load_bf16(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }
inline __m512bh load_bf16_tail(const uint16_t* p, __mmask32 mask) { return (__m512bh)_mm512_maskz_loadu_epi16(mask, p); }

// RT rows starting at r0 times TT tokens starting at t0; x holds the activations as bf16 bits.
template <WeightType T, int RT, int TT>
struct Tile {
    static_assert(T == WeightType::BF16, "only bf16 weights take this path");
    static void run(const WeightMatrix& w, int r0, const uint16_t* x, const QuantizedInput*, int t0, float* y) {
        const int cols = w.cols;
        const uint16_t* rows[RT];
        ANVIL_UNROLL
        for (int r = 0; r < RT; ++r) rows[r] = static_cast<const uint16_t*>(w.data) + size_t(r0 + r) * cols;
        const uint16_t* xs[TT];
        ANVIL_UNROLL
        for (int t = 0; t < TT; ++t) xs[t] = x + size_t(t0 + t) * cols;
        __m512 acc[RT][TT];
        ANVIL_UNROLL
        for (int r = 0; r < RT; ++r)
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) acc[r][t] = _mm512_setzero_ps();

        const auto step = [&](int k, auto load) {
            __m512bh xv[TT];
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) xv[t] = load(xs[t] + k);
            ANVIL_UNROLL
            for (int r = 0; r < RT; ++r) {
                const __m512bh wv = load(rows[r] + k);
                ANVIL_UNROLL
                for (int t = 0; t < TT; ++t) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv, xv[t]);
            }
        };
        int k = 0;
        for (; k + kPairs <= cols; k += kPairs) {
            // A cache line a row and step: 1 KB ahead in the row into L1, and the next tile's
            // line at this offset into L2 (as matmul_avx2.cpp's float tiles).
            ANVIL_UNROLL
            for (int r = 0; r < RT; ++r) {
                const char* here = reinterpret_cast<const char*>(rows[r] + k);
                _mm_prefetch(here + kPrefetchNear, _MM_HINT_T0);
                _mm_prefetch(here + 2 * size_t(RT) * cols, _MM_HINT_T1);
            }
            step(k, [](const uint16_t* p) { return load_bf16(p); });
        }
        if (k < cols) {
            // Zeros past the row's end add nothing.
            const __mmask32 mask = __mmask32((uint64_t(1) << (cols - k)) - 1);
            step(k, [mask](const uint16_t* p) { return load_bf16_tail(p, mask); });
        }
        ANVIL_UNROLL
        for (int r = 0; r < RT; ++r)
            ANVIL_UNROLL
            for (int t = 0; t < TT; ++t) y[size_t(t0 + t) * w.rows + r0 + r] = _mm512_reduce_add_ps(acc[r][t]);
    }
};

}  // namespace

void matmul_avx512bf16(const WeightMatrix* ws, float* const* ys, int count, const float* x, const QuantizedInput* qx,
                       int n_tokens) {
    if (ws[0].type == WeightType::Q8 || ws[0].type == WeightType::Q8Packed) return matmul_avx512vnni(ws, ys, count, x, qx, n_tokens);
    if (ws[0].type != WeightType::BF16) return matmul_avx512(ws, ys, count, x, qx, n_tokens);
    // Grown only, kept per thread: the decode loop reuses it without allocating.
    thread_local std::vector<uint16_t> rounded;
    const int cols = ws[0].cols;
    const size_t n = size_t(n_tokens) * size_t(cols);
    if (rounded.size() < n) rounded.resize(n);
    // Row by row, so that a token's rounding never depends on the tokens batched with it.
    for (int t = 0; t < n_tokens; ++t)
        f32_to_bf16_avx512bf16(x + size_t(t) * cols, rounded.data() + size_t(t) * cols, size_t(cols));
    run_tiles<Tile, WeightType::BF16, 4, 4>(ws, ys, count, rounded.data(), qx, n_tokens);
}

}  // namespace anvil::kernels::detail
