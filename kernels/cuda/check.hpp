// Checking every CUDA and cuBLAS call (internal to kernels/cuda: this header includes the
// toolkit's). A failure throws CudaError: "<call> failed at <file>:<line>: <error name>: <text>".
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/cuda/device.hpp"

namespace anvil::kernels::cuda::detail {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
    if (status != cudaSuccess) throw_cuda_error(status, call, file, line);
}
inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error(status, call, file, line);
}

inline cudaStream_t stream_of(const Context& context) { return static_cast<cudaStream_t>(context.stream()); }

}  // namespace anvil::kernels::cuda::detail

#define ANVIL_CUDA_CHECK(call) ::anvil::kernels::cuda::detail::check_cuda((call), #call, __FILE__, __LINE__)
#define ANVIL_CUBLAS_CHECK(call) ::anvil::kernels::cuda::detail::check_cublas((call), #call, __FILE__, __LINE__)
// After a <<<...>>> launch: a bad configuration is reported here, a fault in the kernel at the
// next synchronization.
#define ANVIL_CUDA_CHECK_LAUNCH(kernel) \
    ::anvil::kernels::cuda::detail::check_cuda(cudaGetLastError(), "launch of " kernel, __FILE__, __LINE__)
