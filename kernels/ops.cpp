#include "kernels/ops.hpp"

#include <immintrin.h>

#include <cmath>

namespace anvil::kernels {

float dot(const float* a, const float* b, int n) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    __m128 low = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    low = _mm_add_ps(low, _mm_movehl_ps(low, low));
    low = _mm_add_ss(low, _mm_movehdup_ps(low));
    float sum = _mm_cvtss_f32(low);
    for (; i < n; ++i) sum += a[i] * b[i];
    return sum;
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
