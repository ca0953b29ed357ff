#pragma once
// What the project's CUDA kernels read and write at once: N elements of T in one aligned load or
// store (N = 16 / sizeof(T) by default: 8 bf16, 4 fp32), and a grid-stride loop's indices.
#include <cstdint>

namespace segtrain::kernels {

template <typename T, int N = 16 / sizeof(T)>
struct alignas(sizeof(T) * N) Pack {
  static constexpr int kCount = N;
  T v[N];
};

// This thread's first index and the step between its indices in a grid-stride loop.
struct GridStride {
  int64_t first, stride;
};
__device__ inline GridStride grid_stride() {
  return {static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, static_cast<int64_t>(gridDim.x) * blockDim.x};
}

}  // namespace segtrain::kernels
