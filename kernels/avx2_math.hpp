// Eight-float helpers for the AVX2/FMA baseline files (ops.cpp, attention.cpp): bf16 widening, a
// horizontal sum and e^x. Internal linkage on purpose, as matmul_tiling.hpp: a shared inline copy
// chosen by the linker must never come from a file built with other instruction-set flags.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace anvil::kernels {
namespace {

// Eight consecutive bf16 values widened to floats.
inline __m256 load_bf16x8(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return load_bf16x8(p); }

inline float horizontal_sum(__m256 v) {
    __m128 low = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    low = _mm_add_ps(low, _mm_movehl_ps(low, low));
    low = _mm_add_ss(low, _mm_movehdup_ps(low));
    return _mm_cvtss_f32(low);
}

// Lanes i < n all ones: the mask of a loop's last, partial vector (0 < n < 8).
inline __m256i first_lanes(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// e^x of eight floats: 2^k * e^r with k = round(x / ln 2) and r = x - k ln 2 (ln 2 in two parts,
// so r keeps its low bits), e^r by Cephes' degree-7 polynomial: within 2 ulp of expf. The scalar
// libm call per value cost decode more than all of the activations' rounding (silu alone is 2,816
// calls a layer). x is clamped to [-87.3, 88.0], where 2^k stays a normal float: e^x below that is
// 1e-38 rather than 0, above it 1.7e38 rather than infinity. NaN stays NaN (minps and maxps
// return their second operand when either is NaN).
inline __m256 exp8(__m256 x) {
    x = _mm256_max_ps(_mm256_set1_ps(-87.3365f), _mm256_min_ps(_mm256_set1_ps(88.0f), x));
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i two_k = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(two_k));
}

}  // namespace
}  // namespace anvil::kernels
