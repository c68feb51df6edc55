#include "kernels/ops.hpp"

#include <immintrin.h>

#include <cmath>

#include "kernels/weight_matrix.hpp"

namespace anvil::kernels {

namespace {

// Eight consecutive bf16 values widened to floats.
inline __m256 load_bf16x8(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

float horizontal_sum(__m256 v) {
    __m128 low = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    low = _mm_add_ps(low, _mm_movehl_ps(low, low));
    low = _mm_add_ss(low, _mm_movehdup_ps(low));
    return _mm_cvtss_f32(low);
}

}  // namespace

float dot(const float* a, const float* b, int n) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    float sum = horizontal_sum(acc);
    for (; i < n; ++i) sum += a[i] * b[i];
    return sum;
}

float dot_bf16(const float* a, const uint16_t* b, int n) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load_bf16x8(b + i), acc);
    float sum = horizontal_sum(acc);
    for (; i < n; ++i) sum += a[i] * bf16_to_f32(b[i]);
    return sum;
}

// out[0..n) += p * v[0..n)
void add_scaled(float* out, float p, const float* v, int n) {
    const __m256 pv = _mm256_set1_ps(p);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + i), _mm256_loadu_ps(out + i)));
    for (; i < n; ++i) out[i] = std::fma(p, v[i], out[i]);
}

void add_scaled(float* out, float p, const uint16_t* v, int n) {
    const __m256 pv = _mm256_set1_ps(p);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_fmadd_ps(pv, load_bf16x8(v + i), _mm256_loadu_ps(out + i)));
    for (; i < n; ++i) out[i] = std::fma(p, bf16_to_f32(v[i]), out[i]);
}

void rmsnorm(float* out, const float* x, const float* weight, int n, float eps) {
    const float mean_square = dot(x, x, n) / float(n);
    const float inverse = 1.0f / std::sqrt(mean_square + eps);
    for (int i = 0; i < n; ++i) out[i] = x[i] * inverse * weight[i];
}

void rope(float* vec, int n_heads, int head_dim, const float* cos, const float* sin) {
    const int half = head_dim / 2;
    for (int h = 0; h < n_heads; ++h) {
        float* head = vec + h * head_dim;
        for (int i = 0; i < half; ++i) {
            const float a = head[i];
            const float b = head[i + half];
            head[i] = a * cos[i] - b * sin[i];
            head[i + half] = b * cos[i] + a * sin[i];
        }
    }
}

void rope_pairs(float* vec, int n_heads, int head_dim, const float* cos, const float* sin) {
    const int half = head_dim / 2;
    for (int h = 0; h < n_heads; ++h) {
        float* head = vec + h * head_dim;
        for (int i = 0; i < half; ++i) {
            const float a = head[2 * i];
            const float b = head[2 * i + 1];
            head[2 * i] = a * cos[i] - b * sin[i];
            head[2 * i + 1] = b * cos[i] + a * sin[i];
        }
    }
}

void softmax(float* x, int n) {
    float largest = x[0];
    // A comparison, not std::fmax: that is a library call per element here.
    for (int i = 1; i < n; ++i) largest = x[i] > largest ? x[i] : largest;
    float sum = 0.0f;
    for (int i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - largest);
        sum += x[i];
    }
    const float inverse = 1.0f / sum;
    for (int i = 0; i < n; ++i) x[i] *= inverse;
}

void silu_mul(float* gate, const float* up, int n) {
    for (int i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void add(float* x, const float* y, int n) {
    for (int i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace anvil::kernels
