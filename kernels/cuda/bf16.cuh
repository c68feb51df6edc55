// bf16 bits to and from f32 on the device, bit for bit as kernels/weight_matrix.hpp does it.
#pragma once

#include <cstdint>

namespace anvil::kernels::cuda::detail {

__device__ __forceinline__ float bf16_bits_to_f32(uint32_t bits16) { return __uint_as_float(bits16 << 16); }

// The low and high halves of a 32-bit word holding two bf16 values (the lower address is low).
__device__ __forceinline__ float bf16_low(uint32_t word) { return __uint_as_float(word << 16); }
__device__ __forceinline__ float bf16_high(uint32_t word) { return __uint_as_float(word & 0xffff0000u); }

// Round to nearest even; NaN stays NaN (quiet bit set); subnormals flush to signed zero.
__device__ __forceinline__ uint16_t f32_to_bf16_bits(float value) {
    uint32_t bits = __float_as_uint(value);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
    if ((bits & 0x7f800000u) == 0) return uint16_t((bits >> 16) & 0x8000);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return uint16_t(bits >> 16);
}

}  // namespace anvil::kernels::cuda::detail
