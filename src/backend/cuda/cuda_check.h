// Error checking for CUDA runtime and cuBLAS calls: every call's status is checked, and a failure
// throws strata::Error naming the call, the file and line, and CUDA's own message. Kernel launches
// are followed by STRATA_CUDA_LAUNCH_CHECK() (cudaGetLastError), so a bad launch configuration is
// caught at the op that made it, not at the next synchronisation.
// Thread-safety: stateless.
#pragma once

#include <cuda_runtime_api.h>

namespace strata::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(int status, const char* call, const char* file, int line);

}  // namespace strata::cuda

#define STRATA_CUDA(call)                                                                          \
  do {                                                                                             \
    const cudaError_t strata_cuda_e_ = (call);                                                     \
    if (strata_cuda_e_ != cudaSuccess) ::strata::cuda::throw_cuda_error(strata_cuda_e_, #call, __FILE__, __LINE__); \
  } while (0)

#define STRATA_CUDA_LAUNCH_CHECK() STRATA_CUDA(cudaGetLastError())

#define STRATA_CUBLAS(call)                                                                        \
  do {                                                                                             \
    const int strata_cublas_s_ = static_cast<int>(call);                                           \
    if (strata_cublas_s_ != 0) ::strata::cuda::throw_cublas_error(strata_cublas_s_, #call, __FILE__, __LINE__); \
  } while (0)
