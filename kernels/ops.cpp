#include "kernels/ops.hpp"

#include <immintrin.h>

#include <cmath>

#include "kernels/avx2_math.hpp"
#include "kernels/weight_matrix.hpp"

namespace anvil::kernels {


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
    // max keeps the running value where an element is NaN, as the comparison it replaced did.
    __m256 running = _mm256_set1_ps(x[0]);
    int i = 0;
    for (; i + 8 <= n; i += 8) running = _mm256_max_ps(_mm256_loadu_ps(x + i), running);
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(running), _mm256_extractf128_ps(running, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    float largest = _mm_cvtss_f32(m);
    for (; i < n; ++i) largest = x[i] > largest ? x[i] : largest;
    const __m256 top = _mm256_set1_ps(largest);
    __m256 total = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), top));
        _mm256_storeu_ps(x + i, e);
        total = _mm256_add_ps(total, e);
    }
    if (i < n) {
        const __m256i lanes = first_lanes(n - i);
        const __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, lanes), top)), _mm256_castsi256_ps(lanes));
        _mm256_maskstore_ps(x + i, lanes, e);
        total = _mm256_add_ps(total, e);
    }
    const __m256 inverse = _mm256_set1_ps(1.0f / horizontal_sum(total));
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inverse));
    for (; i < n; ++i) x[i] *= _mm256_cvtss_f32(inverse);
}

// gate / (1 + e^-gate) * up, eight at a time.
void silu_mul(float* gate, const float* up, int n) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    auto silu = [&](__m256 g, __m256 u) { return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, exp8(_mm256_xor_ps(g, sign)))), u); };
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(gate + i, silu(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        const __m256i lanes = first_lanes(n - i);
        _mm256_maskstore_ps(gate + i, lanes, silu(_mm256_maskload_ps(gate + i, lanes), _mm256_maskload_ps(up + i, lanes)));
    }
}

void add(float* x, const float* y, int n) {
    for (int i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace anvil::kernels
