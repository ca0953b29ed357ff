#pragma once
// The second stage of the project's deterministic column sums (bias_gradient_plan.h): a column's
// fp32 partial sums, one a split of the rows, added in split order and rounded once to the
// gradient's dtype. Shared by the linears' bias gradients (bias_gradient_cuda.cu) and LayerNorm's
// weight and bias gradients (residual_norm_cuda.cu).
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>

namespace segtrain::kernels {

// Up to two sums at once (the grid's y picks one): out[y][c] = partials [y][splits][cols] of column c.
template <typename T>
struct PartialSumOutputs {
  T* out[2];
};

template <typename T>
__global__ void sum_partials_kernel(const float* __restrict__ partial, PartialSumOutputs<T> outputs, int64_t splits,
                                    int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const float* p = partial + static_cast<int64_t>(blockIdx.y) * splits * cols;
  float s = p[c];
  for (int64_t k = 1; k < splits; ++k) s += p[k * cols + c];
  outputs.out[blockIdx.y][c] = static_cast<T>(s);
}

// out[c] = the partials [splits, cols] of column c added in split order, on the current stream; with a
// second output, the next [splits, cols] partials into it in the same launch.
template <typename T>
void launch_sum_partials(const float* partial, T* out, int64_t splits, int64_t cols, T* second_out = nullptr) {
  constexpr int kThreads = 256;
  const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads), second_out == nullptr ? 1u : 2u);
  sum_partials_kernel<T><<<grid, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      partial, PartialSumOutputs<T>{{out, second_out}}, splits, cols);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace segtrain::kernels
