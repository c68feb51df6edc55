#include "kernels/ggml_blocks.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/weight_matrix.hpp"

namespace anvil::kernels {

namespace {

float load_f16(const uint8_t* p) {
    uint16_t bits;
    std::memcpy(&bits, p, 2);
    return f16_to_f32(bits);
}

void store_f16(uint8_t* p, float value) {
    const uint16_t bits = f32_to_f16(value);
    std::memcpy(p, &bits, 2);
}

int nearest(float x) { return int(std::lrint(x)); }

// Weights for the scale searches: every value counts, larger ones more (the rule llama-quantize
// uses without an importance matrix), since a large weight's error moves the product most.
void search_weights(const float* x, int n, float* w) {
    float sum2 = 0;
    for (int i = 0; i < n; ++i) sum2 += x[i] * x[i];
    const float typical = std::sqrt(sum2 / float(n));
    for (int i = 0; i < n; ++i) w[i] = typical + std::fabs(x[i]);
}

// Q4_K's sub-block fit: x ~ scale * q - min with q in 0..15, scale > 0 and min >= 0 (the zero lies
// in the range, as the format's unsigned mins require). Tries 21 spreads of the 16 steps over the
// range, fits scale and min to each rounding by weighted least squares, and keeps the best.
void fit_scale_min(const float* x, const float* w, float& scale, float& min) {
    constexpr int n = 32;
    float lo = std::min(0.0f, *std::min_element(x, x + n));
    const float hi = *std::max_element(x, x + n);
    if (hi <= lo) {
        scale = 0;
        min = -lo;
        return;
    }
    float best_error = INFINITY;
    scale = (hi - lo) / 15;
    min = -lo;
    for (int step = 0; step <= 20; ++step) {
        const float inverse = (14.0f + 0.1f * float(step)) / (hi - lo);
        double swqq = 0, swq = 0, sw = 0, swqx = 0, swx = 0;
        uint8_t q[n];
        for (int i = 0; i < n; ++i) {
            q[i] = uint8_t(std::clamp(nearest(inverse * (x[i] - lo)), 0, 15));
            swqq += double(w[i]) * q[i] * q[i];
            swq += double(w[i]) * q[i];
            sw += w[i];
            swqx += double(w[i]) * q[i] * x[i];
            swx += double(w[i]) * x[i];
        }
        const double det = sw * swqq - swq * swq;
        if (det <= 0) continue;
        double a = (sw * swqx - swq * swx) / det;
        double b = (swqq * swx - swq * swqx) / det;
        if (b > 0) {  // the offset must not be above zero: fit the scale alone
            b = 0;
            a = swqx / swqq;
        }
        if (a <= 0) continue;
        double error = 0;
        for (int i = 0; i < n; ++i) {
            const double d = a * q[i] + b - x[i];
            error += w[i] * d * d;
        }
        if (error < best_error) {
            best_error = float(error);
            scale = float(a);
            min = float(-b);
        }
    }
}

// Q6_K's sub-block fit: x ~ scale * q with q in -32..31. The value of largest magnitude goes to
// the end with 32 steps (-32), then 19 nearby step sizes are tried, the scale refitted to each.
float fit_symmetric(const float* x, const float* w, int n) {
    float largest = 0, extreme = 0;
    for (int i = 0; i < n; ++i)
        if (std::fabs(x[i]) > largest) {
            largest = std::fabs(x[i]);
            extreme = x[i];
        }
    if (largest < 1e-30f) return 0;
    float best_error = INFINITY, best = -extreme / 32;
    for (int step = -9; step <= 9; ++step) {
        const float inverse = -(32.0f + 0.1f * float(step)) / extreme;
        double swqx = 0, swqq = 0;
        int q[32];
        for (int i = 0; i < n; ++i) {
            q[i] = std::clamp(nearest(inverse * x[i]), -32, 31);
            swqx += double(w[i]) * q[i] * x[i];
            swqq += double(w[i]) * q[i] * q[i];
        }
        if (swqq <= 0) continue;
        const double a = swqx / swqq;
        double error = 0;
        for (int i = 0; i < n; ++i) {
            const double d = a * q[i] - x[i];
            error += w[i] * d * d;
        }
        if (error < best_error) {
            best_error = float(error);
            best = float(a);
        }
    }
    return best;
}

}  // namespace

void dequantize_q4_0(const uint8_t* blocks, size_t n, float* out) {
    for (size_t b = 0; b < n / kQ4_0Values; ++b) {
        const uint8_t* block = blocks + b * kQ4_0Bytes;
        const float d = load_f16(block);
        float* y = out + b * kQ4_0Values;
        for (int j = 0; j < 16; ++j) {
            y[j] = d * float(int(block[2 + j] & 0x0f) - 8);
            y[j + 16] = d * float(int(block[2 + j] >> 4) - 8);
        }
    }
}

void dequantize_q5_0(const uint8_t* blocks, size_t n, float* out) {
    for (size_t b = 0; b < n / kQ4_0Values; ++b) {
        int8_t q[32];
        const float d = q5_0_block_to_int8(blocks + b * kQ5_0Bytes, q);
        for (int j = 0; j < 32; ++j) out[b * kQ4_0Values + size_t(j)] = d * float(q[j]);
    }
}

void dequantize_q4_k(const uint8_t* blocks, size_t n, float* out) {
    for (size_t b = 0; b < n / kSuperBlock; ++b) {
        const uint8_t* block = blocks + b * kQ4_KBytes;
        const float d = load_f16(block), dmin = load_f16(block + 2);
        uint8_t sm[16];
        unpack_q4_k_scales(block + 4, sm);
        const uint8_t* qs = block + 16;
        float* y = out + b * kSuperBlock;
        for (int c = 0; c < 4; ++c) {
            const float d0 = d * sm[2 * c], m0 = dmin * sm[8 + 2 * c];
            const float d1 = d * sm[2 * c + 1], m1 = dmin * sm[8 + 2 * c + 1];
            for (int l = 0; l < 32; ++l) {
                y[64 * c + l] = d0 * float(qs[32 * c + l] & 0x0f) - m0;
                y[64 * c + 32 + l] = d1 * float(qs[32 * c + l] >> 4) - m1;
            }
        }
    }
}

namespace {

// A Q6_K block's 256 stored values (q + 32, 0..63) in order.
void q6_k_stored_values(const uint8_t* block, uint8_t q[kSuperBlock]) {
    for (int h = 0; h < 2; ++h) {
        const uint8_t* ql = block + 64 * h;
        const uint8_t* qh = block + 128 + 32 * h;
        uint8_t* out = q + 128 * h;
        for (int l = 0; l < 32; ++l) {
            out[l] = uint8_t((ql[l] & 0x0f) | ((qh[l] & 3) << 4));
            out[l + 32] = uint8_t((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4));
            out[l + 64] = uint8_t((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            out[l + 96] = uint8_t((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
    }
}

}  // namespace

void dequantize_q6_k(const uint8_t* blocks, size_t n, float* out) {
    for (size_t b = 0; b < n / kSuperBlock; ++b) {
        const uint8_t* block = blocks + b * kQ6_KBytes;
        const float d = load_f16(block + 208);
        const auto* scales = reinterpret_cast<const int8_t*>(block + 192);
        uint8_t q[kSuperBlock];
        q6_k_stored_values(block, q);
        float* y = out + b * kSuperBlock;
        for (int k = 0; k < kSuperBlock; ++k) y[k] = d * float(scales[k / 16]) * float(int(q[k]) - 32);
    }
}

void pack_q4_k_rows8(const uint8_t* blocks, int rows, int cols, uint8_t* out) {
    const int supers = cols / kSuperBlock;
    const size_t row_bytes = q4_k_row_bytes(cols);
#pragma omp parallel for schedule(static)
    for (int b = 0; b < pack8_blocks(rows); ++b)
        for (int i = 0; i < supers; ++i) {
            uint8_t* tile = out + (size_t(b) * supers + size_t(i)) * kQ4_KPacked8Bytes;
            std::memset(tile, 0, kQ4_KPacked8Bytes);
            for (int r = 0; r < kPack8Rows; ++r) {
                const int row = b * kPack8Rows + r;
                if (row >= rows) continue;  // padding: zero scales and values
                const uint8_t* block = blocks + size_t(row) * row_bytes + size_t(i) * kQ4_KBytes;
                std::memcpy(tile + 2 * r, block, 2);
                std::memcpy(tile + 16 + 2 * r, block + 2, 2);
                uint8_t sm[16];
                unpack_q4_k_scales(block + 4, sm);
                for (int j = 0; j < 8; ++j) {
                    tile[32 + 8 * j + r] = sm[j];
                    tile[96 + 16 * (j / 2) + 2 * r + j % 2] = sm[8 + j];
                }
                for (int c = 0; c < 4; ++c)
                    for (int s = 0; s < 8; ++s)
                        std::memcpy(tile + 160 + ((c * 8 + s) * kPack8Rows + r) * 4, block + 16 + 32 * c + 4 * s, 4);
            }
        }
}

void dequantize_q4_k_packed8(const uint8_t* packed, int cols, int row, float* out) {
    const int supers = cols / kSuperBlock;
    const int b = row / kPack8Rows, r = row % kPack8Rows;
    for (int i = 0; i < supers; ++i) {
        const uint8_t* tile = packed + (size_t(b) * supers + size_t(i)) * kQ4_KPacked8Bytes;
        const float d = load_f16(tile + 2 * r), dmin = load_f16(tile + 16 + 2 * r);
        float* y = out + size_t(i) * kSuperBlock;
        for (int c = 0; c < 4; ++c)
            for (int half = 0; half < 2; ++half) {
                const int j = 2 * c + half;
                const float scale = d * tile[32 + 8 * j + r], offset = dmin * tile[96 + 16 * (j / 2) + 2 * r + j % 2];
                for (int l = 0; l < 32; ++l) {
                    const uint8_t byte = tile[160 + ((c * 8 + l / 4) * kPack8Rows + r) * 4 + l % 4];
                    y[64 * c + 32 * half + l] = scale * float(half ? byte >> 4 : byte & 0x0f) - offset;
                }
            }
    }
}

namespace {

// What Q6_K's two 8-row layouts share: per 8-row block and super-block a tile of the rows' d and
// scale bytes (padding rows all zero), then their values, which `values(block, tile, r)` places for
// row r from its Q6_K block.
template <typename Values>
void pack_q6_k_tiles(const uint8_t* blocks, int rows, int cols, uint8_t* out, Values values) {
    const int supers = cols / kSuperBlock;
    const size_t row_bytes = q6_k_row_bytes(cols);
#pragma omp parallel for schedule(static)
    for (int b = 0; b < pack8_blocks(rows); ++b)
        for (int i = 0; i < supers; ++i) {
            uint8_t* tile = out + (size_t(b) * supers + size_t(i)) * kQ6_KPacked8Bytes;
            std::memset(tile, 0, kQ6_KPacked8Bytes);
            for (int r = 0; r < kPack8Rows; ++r) {
                const int row = b * kPack8Rows + r;
                if (row >= rows) continue;  // padding: zero scales
                const uint8_t* block = blocks + size_t(row) * row_bytes + size_t(i) * kQ6_KBytes;
                std::memcpy(tile + 2 * r, block + 208, 2);
                for (int j = 0; j < 16; ++j) tile[16 + 16 * (j / 2) + 2 * r + j % 2] = block[192 + j];
                values(block, tile, r);
            }
        }
}

// One row of either layout back to its values: the row's Q6_K block gathered back, `values(tile,
// r, block)` writing its ql and qh bytes, and read as one.
template <typename Values>
void dequantize_q6_k_tiles(const uint8_t* packed, int cols, int row, float* out, Values values) {
    const int supers = cols / kSuperBlock;
    const int b = row / kPack8Rows, r = row % kPack8Rows;
    for (int i = 0; i < supers; ++i) {
        const uint8_t* tile = packed + (size_t(b) * supers + size_t(i)) * kQ6_KPacked8Bytes;
        uint8_t block[kQ6_KBytes];
        std::memcpy(block + 208, tile + 2 * r, 2);
        for (int j = 0; j < 16; ++j) block[192 + j] = tile[16 + 16 * (j / 2) + 2 * r + j % 2];
        values(tile, r, block);
        dequantize_q6_k(block, kSuperBlock, out + size_t(i) * kSuperBlock);
    }
}

}  // namespace

void pack_q6_k_rows8(const uint8_t* blocks, int rows, int cols, uint8_t* out) {
    pack_q6_k_tiles(blocks, rows, cols, out, [](const uint8_t* block, uint8_t* tile, int r) {
        for (int h = 0; h < 2; ++h)
            for (int s = 0; s < 8; ++s) {
                uint8_t* step = tile + 144 + size_t(h * 8 + s) * 96 + 4 * r;
                std::memcpy(step, block + 64 * h + 4 * s, 4);
                std::memcpy(step + 32, block + 64 * h + 32 + 4 * s, 4);
                std::memcpy(step + 64, block + 128 + 32 * h + 4 * s, 4);
            }
    });
}

void dequantize_q6_k_packed8(const uint8_t* packed, int cols, int row, float* out) {
    dequantize_q6_k_tiles(packed, cols, row, out, [](const uint8_t* tile, int r, uint8_t* block) {
        for (int h = 0; h < 2; ++h)
            for (int s = 0; s < 8; ++s) {
                const uint8_t* step = tile + 144 + size_t(h * 8 + s) * 96 + 4 * r;
                std::memcpy(block + 64 * h + 4 * s, step, 4);
                std::memcpy(block + 64 * h + 32 + 4 * s, step + 32, 4);
                std::memcpy(block + 128 + 32 * h + 4 * s, step + 64, 4);
            }
    });
}

namespace {

// A super-block's stored values back into a Q6_K block's ql and qh bytes (q6_k_stored_values' inverse).
void set_q6_k_stored_values(const uint8_t q[kSuperBlock], uint8_t* block) {
    for (int h = 0; h < 2; ++h) {
        uint8_t* ql = block + 64 * h;
        uint8_t* qh = block + 128 + 32 * h;
        const uint8_t* in = q + 128 * h;
        for (int l = 0; l < 32; ++l) {
            ql[l] = uint8_t((in[l] & 0x0f) | ((in[l + 64] & 0x0f) << 4));
            ql[l + 32] = uint8_t((in[l + 32] & 0x0f) | ((in[l + 96] & 0x0f) << 4));
            qh[l] = uint8_t((in[l] >> 4) | ((in[l + 32] >> 4) << 2) | ((in[l + 64] >> 4) << 4) | ((in[l + 96] >> 4) << 6));
        }
    }
}

// Where byte b of row r's four in register k of group g comes from, in a super-block's values.
int q6_k_avx2_position(int g, int k, int b) {
    const int p = g / 2, e = g % 2;
    return 32 * p + 16 * (b / 2) + 8 * e + 2 * k + b % 2;
}

}  // namespace

void pack_q6_k_rows8_avx2(const uint8_t* blocks, int rows, int cols, uint8_t* out) {
    // Per group, the 16-bit interleave of its two sub-blocks' eight values gives the four
    // registers' bytes of a row as four dwords (q6_k_avx2_position); the fourth's bit pairs go to
    // the top of the other three (a byte's bits 6-7 after a dword shift by 6, 4 or 2 are its own
    // bits 0-1, 2-3 or 4-5). Byte by byte this took 6x longer.
    pack_q6_k_tiles(blocks, rows, cols, out, [](const uint8_t* block, uint8_t* tile, int r) {
        uint8_t q[kSuperBlock];
        q6_k_stored_values(block, q);
        const __m128i counts = _mm_setr_epi32(6, 4, 2, 0), top = _mm_set1_epi8(char(0xc0));
        for (int g = 0; g < 16; ++g) {
            const uint8_t* first = q + 32 * (g / 2) + 8 * (g % 2);
            const __m128i four = _mm_unpacklo_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(first)),
                                                    _mm_loadl_epi64(reinterpret_cast<const __m128i*>(first + 16)));
            const __m128i fourth = _mm_shuffle_epi32(four, 0xff);
            const __m128i runs = _mm_or_si128(four, _mm_and_si128(_mm_sllv_epi32(fourth, counts), top));
            uint8_t* at = tile + 144 + 96 * g + 4 * r;
            const int32_t r0 = _mm_cvtsi128_si32(runs), r1 = _mm_extract_epi32(runs, 1), r2 = _mm_extract_epi32(runs, 2);
            std::memcpy(at, &r0, 4);
            std::memcpy(at + 32, &r1, 4);
            std::memcpy(at + 64, &r2, 4);
        }
    });
}

void dequantize_q6_k_packed8_avx2(const uint8_t* packed, int cols, int row, float* out) {
    dequantize_q6_k_tiles(packed, cols, row, out, [](const uint8_t* tile, int r, uint8_t* block) {
        uint8_t q[kSuperBlock];
        for (int g = 0; g < 16; ++g)
            for (int byte = 0; byte < 4; ++byte) {
                uint8_t v3 = 0;
                for (int k = 0; k < 3; ++k) {
                    const uint8_t stored = tile[144 + 96 * g + 32 * k + 4 * r + byte];
                    q[q6_k_avx2_position(g, k, byte)] = stored & 0x3f;
                    v3 = uint8_t(v3 | ((stored >> 6) << (2 * k)));
                }
                q[q6_k_avx2_position(g, 3, byte)] = v3;
            }
        set_q6_k_stored_values(q, block);
    });
}

void pack_q4_0_rows8(const uint8_t* blocks, int rows, int cols, uint8_t* out) {
    const int per_row = cols / kQ4_0Values;
    const size_t row_bytes = q4_0_row_bytes(cols);
#pragma omp parallel for schedule(static)
    for (int b = 0; b < pack8_blocks(rows); ++b)
        for (int i = 0; i < per_row; ++i) {
            uint8_t* tile = out + (size_t(b) * per_row + size_t(i)) * kQ4_0Packed8Bytes;
            std::memset(tile, 0, kQ4_0Packed8Bytes);
            for (int r = 0; r < kPack8Rows; ++r) {
                const int row = b * kPack8Rows + r;
                if (row >= rows) continue;  // padding: d = 0
                const uint8_t* block = blocks + size_t(row) * row_bytes + size_t(i) * kQ4_0Bytes;
                std::memcpy(tile + 2 * r, block, 2);
                for (int s = 0; s < 4; ++s) std::memcpy(tile + 16 + (s * kPack8Rows + r) * 4, block + 2 + 4 * s, 4);
            }
        }
}

void dequantize_q4_0_packed8(const uint8_t* packed, int cols, int row, float* out) {
    const int per_row = cols / kQ4_0Values;
    const int b = row / kPack8Rows, r = row % kPack8Rows;
    for (int i = 0; i < per_row; ++i) {
        const uint8_t* tile = packed + (size_t(b) * per_row + size_t(i)) * kQ4_0Packed8Bytes;
        uint8_t block[kQ4_0Bytes];
        std::memcpy(block, tile + 2 * r, 2);
        for (int s = 0; s < 4; ++s) std::memcpy(block + 2 + 4 * s, tile + 16 + (s * kPack8Rows + r) * 4, 4);
        dequantize_q4_0(block, kQ4_0Values, out + size_t(i) * kQ4_0Values);
    }
}

void quantize_q4_0(const float* x, size_t n, uint8_t* out) {
    for (size_t b = 0; b < n / kQ4_0Values; ++b) {
        const float* v = x + b * kQ4_0Values;
        uint8_t* block = out + b * kQ4_0Bytes;
        float largest = 0, extreme = 0;
        for (int j = 0; j < kQ4_0Values; ++j)
            if (std::fabs(v[j]) > largest) {
                largest = std::fabs(v[j]);
                extreme = v[j];
            }
        const float d = extreme / -8;
        const float inverse = d != 0 ? 1.0f / d : 0.0f;
        store_f16(block, d);
        for (int j = 0; j < 16; ++j) {
            // Truncation after + 8.5 is ggml's rounding (half up); the int8 cast keeps its range.
            const int lo = std::min(15, int(int8_t(v[j] * inverse + 8.5f)));
            const int hi = std::min(15, int(int8_t(v[j + 16] * inverse + 8.5f)));
            block[2 + j] = uint8_t(lo | (hi << 4));
        }
    }
}

void quantize_q5_0(const float* x, size_t n, uint8_t* out) {
    for (size_t b = 0; b < n / kQ4_0Values; ++b) {
        const float* v = x + b * kQ4_0Values;
        uint8_t* block = out + b * kQ5_0Bytes;
        float largest = 0, extreme = 0;
        for (int j = 0; j < kQ4_0Values; ++j)
            if (std::fabs(v[j]) > largest) {
                largest = std::fabs(v[j]);
                extreme = v[j];
            }
        const float d = extreme / -16;
        const float inverse = d != 0 ? 1.0f / d : 0.0f;
        store_f16(block, d);
        uint32_t high = 0;
        for (int j = 0; j < 16; ++j) {
            const int lo = std::min(31, int(int8_t(v[j] * inverse + 16.5f)));
            const int hi = std::min(31, int(int8_t(v[j + 16] * inverse + 16.5f)));
            block[6 + j] = uint8_t((lo & 0x0f) | ((hi & 0x0f) << 4));
            high |= uint32_t(lo >> 4) << j;
            high |= uint32_t(hi >> 4) << (j + 16);
        }
        std::memcpy(block + 2, &high, 4);
    }
}

void quantize_q4_k(const float* x, size_t n, uint8_t* out) {
    for (size_t b = 0; b < n / kSuperBlock; ++b) {
        const float* v = x + b * kSuperBlock;
        uint8_t* block = out + b * kQ4_KBytes;
        float scales[8], mins[8], w[32];
        for (int j = 0; j < 8; ++j) {
            search_weights(v + 32 * j, 32, w);
            fit_scale_min(v + 32 * j, w, scales[j], mins[j]);
        }
        const float max_scale = *std::max_element(scales, scales + 8);
        const float max_min = *std::max_element(mins, mins + 8);
        const float to_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
        const float to_min = max_min > 0 ? 63.0f / max_min : 0.0f;
        uint8_t sc[8], m[8];
        for (int j = 0; j < 8; ++j) {
            sc[j] = uint8_t(std::min(63, nearest(to_scale * scales[j])));
            m[j] = uint8_t(std::min(63, nearest(to_min * mins[j])));
        }
        store_f16(block, max_scale / 63);
        store_f16(block + 2, max_min / 63);
        uint8_t* s = block + 4;
        std::memset(s, 0, 12);
        for (int j = 0; j < 8; ++j) {
            if (j < 4) {
                s[j] = sc[j];
                s[j + 4] = m[j];
            } else {
                s[j + 4] = uint8_t((sc[j] & 0x0f) | ((m[j] & 0x0f) << 4));
                s[j - 4] |= uint8_t((sc[j] >> 4) << 6);
                s[j] |= uint8_t((m[j] >> 4) << 6);
            }
        }
        // The values rounded again against the scales as stored (f16 times 6 bits).
        const float d = load_f16(block), dmin = load_f16(block + 2);
        uint8_t q[kSuperBlock];
        for (int j = 0; j < 8; ++j) {
            const float step = d * sc[j], offset = dmin * m[j];
            for (int l = 0; l < 32; ++l)
                q[32 * j + l] = step > 0 ? uint8_t(std::clamp(nearest((v[32 * j + l] + offset) / step), 0, 15)) : 0;
        }
        uint8_t* qs = block + 16;
        for (int c = 0; c < 4; ++c)
            for (int l = 0; l < 32; ++l) qs[32 * c + l] = uint8_t(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
    }
}

void quantize_q6_k(const float* x, size_t n, uint8_t* out) {
    for (size_t b = 0; b < n / kSuperBlock; ++b) {
        const float* v = x + b * kSuperBlock;
        uint8_t* block = out + b * kQ6_KBytes;
        float scales[16], w[16];
        for (int j = 0; j < 16; ++j) {
            search_weights(v + 16 * j, 16, w);
            scales[j] = fit_symmetric(v + 16 * j, w, 16);
        }
        float largest = 0, extreme = 0;
        for (float s : scales)
            if (std::fabs(s) > largest) {
                largest = std::fabs(s);
                extreme = s;
            }
        // The scale of largest magnitude becomes -128, the int8 end with the most steps.
        const float to_step = largest > 0 ? -128.0f / extreme : 0.0f;
        auto* sc = reinterpret_cast<int8_t*>(block + 192);
        for (int j = 0; j < 16; ++j) sc[j] = int8_t(std::clamp(nearest(to_step * scales[j]), -128, 127));
        store_f16(block + 208, largest > 0 ? 1.0f / to_step : 0.0f);
        const float d = load_f16(block + 208);
        uint8_t q[kSuperBlock];
        for (int j = 0; j < 16; ++j) {
            const float step = d * float(sc[j]);
            for (int l = 0; l < 16; ++l)
                q[16 * j + l] = step != 0 ? uint8_t(std::clamp(nearest(v[16 * j + l] / step), -32, 31) + 32) : 32;
        }
        for (int h = 0; h < 2; ++h) {
            uint8_t* ql = block + 64 * h;
            uint8_t* qh = block + 128 + 32 * h;
            const uint8_t* qv = q + 128 * h;
            for (int l = 0; l < 32; ++l) {
                const uint8_t q1 = qv[l], q2 = qv[l + 32], q3 = qv[l + 64], q4 = qv[l + 96];
                ql[l] = uint8_t((q1 & 0x0f) | ((q3 & 0x0f) << 4));
                ql[l + 32] = uint8_t((q2 & 0x0f) | ((q4 & 0x0f) << 4));
                qh[l] = uint8_t((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
    }
}

}  // namespace anvil::kernels
