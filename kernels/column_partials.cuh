#pragma once
// The second stage of the project's deterministic column sums (bias_gradient_plan.h): a column's
// fp32 partial sums, one a split of the rows, added in split order and rounded once to the
// gradient's dtype. Shared by the linears' bias gradients (bias_gradient_cuda.cu) and LayerNorm's
// weight and bias gradients (residual_norm_cuda.cu).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <cstdint>

namespace segtrain::kernels {

template <typename T>
__global__ void sum_partials_kernel(const float* __restrict__ partial, T* __restrict__ out, int64_t splits,
                                    int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = partial[c];
  for (int64_t k = 1; k < splits; ++k) s += partial[k * cols + c];
  out[c] = static_cast<T>(s);
}

// out[c] = the partials [splits, cols] of column c added in split order, on the current stream.
template <typename T>
void launch_sum_partials(const float* partial, T* out, int64_t splits, int64_t cols) {
  constexpr int kThreads = 256;
  sum_partials_kernel<T><<<static_cast<unsigned>((cols + kThreads - 1) / kThreads), kThreads, 0,
                           at::cuda::getCurrentCUDAStream()>>>(partial, out, splits, cols);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace segtrain::kernels
