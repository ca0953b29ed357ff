#include "kernels/bias_gradient_cuda.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContextLight.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>

#include "kernels/bias_gradient_plan.h"
#include "kernels/column_partials.cuh"
#include "kernels/gelu_element.h"
#include "kernels/vector_pack.cuh"

namespace segtrain::kernels {

namespace {

enum class RowTransform { none, gelu_erf, gelu_tanh };

template <RowTransform kTransform>
__device__ inline float transformed(float a, float dy) {
  if constexpr (kTransform == RowTransform::gelu_tanh) return gelu_tanh_gradient(a, dy);
  else if constexpr (kTransform == RowTransform::gelu_erf) return gelu_erf_gradient(a, dy);
  else return a;
}

// One split of the rows of kColumnThreads packs of columns (bias_gradient_plan.h): each thread
// adds its rows in fp32, the block its kRowThreads sums in order into `partial[split][column]`.
// With a GELU transform the rows are d pre = dy gelu'(a), written to `rows_out` as rounded, and
// the sums are of the rounded values (what ATen's sum of the d pre tensor adds).
template <typename T, int N, RowTransform kTransform>
__global__ void __launch_bounds__(kColumnThreads* kRowThreads)
    column_partials_kernel(const T* __restrict__ a, const T* __restrict__ dy, T* __restrict__ rows_out,
                           float* __restrict__ partial, int64_t rows, int64_t cols, int64_t rows_per_split) {
  // [y][element of the pack][x]: a warp (one y) writes consecutive words, no bank conflicts.
  __shared__ float sums[kRowThreads][N][kColumnThreads];
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * kColumnThreads + threadIdx.x) * N;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * rows_per_split;
  const int64_t end = begin + rows_per_split < rows ? begin + rows_per_split : rows;
  float acc[N];
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] = 0.0f;
  if (col < cols) {
#pragma unroll 4
    for (int64_t r = begin + threadIdx.y; r < end; r += kRowThreads) {
      const int64_t at = r * cols + col;
      const Pack<T, N> x = *reinterpret_cast<const Pack<T, N>*>(a + at);
      if constexpr (kTransform == RowTransform::none) {
#pragma unroll
        for (int i = 0; i < N; ++i) acc[i] += static_cast<float>(x.v[i]);
      } else {
        const Pack<T, N> d = *reinterpret_cast<const Pack<T, N>*>(dy + at);
        Pack<T, N> g;
#pragma unroll
        for (int i = 0; i < N; ++i) {
          g.v[i] = static_cast<T>(transformed<kTransform>(static_cast<float>(x.v[i]), static_cast<float>(d.v[i])));
          // __fadd_rn: nvcc would otherwise fuse an fp32 g's product into this add (an FMA), summing g
          // unrounded where the sum is of g as written.
          acc[i] = __fadd_rn(acc[i], static_cast<float>(g.v[i]));
        }
        *reinterpret_cast<Pack<T, N>*>(rows_out + at) = g;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < N; ++i) sums[threadIdx.y][i][threadIdx.x] = acc[i];
  __syncthreads();
  if (threadIdx.y != 0 || col >= cols) return;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    float s = sums[0][i][threadIdx.x];
    for (int y = 1; y < kRowThreads; ++y) s += sums[y][i][threadIdx.x];
    partial[static_cast<int64_t>(blockIdx.y) * cols + col + i] = s;
  }
}

void check_operand(const at::Tensor& t, const at::Tensor& like, const char* name) {
  const auto dtype = like.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf,
              "bias_gradient_cuda: takes fp32, bf16 or fp16 (its sums are fp32); got ", dtype);
  TORCH_CHECK(t.is_cuda() && t.dim() == 2 && t.is_contiguous() && t.scalar_type() == like.scalar_type() &&
                  t.sizes() == like.sizes(),
              "bias_gradient_cuda: ", name, " must be a contiguous 2-d CUDA tensor of the gradient's shape and dtype");
}

bool aligned16(const at::Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.const_data_ptr()) % 16 == 0; }

template <typename T, int N, RowTransform kTransform>
void launch_partials(const ColumnSumPlan& plan, const at::Tensor& a, const at::Tensor& dy, const at::Tensor& rows_out,
                     const at::Tensor& partial) {
  const dim3 grid(static_cast<unsigned>(plan.column_tiles), static_cast<unsigned>(plan.splits));
  const dim3 block(kColumnThreads, kRowThreads);
  column_partials_kernel<T, N, kTransform><<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
      a.const_data_ptr<T>(), dy.defined() ? dy.const_data_ptr<T>() : nullptr,
      rows_out.defined() ? rows_out.mutable_data_ptr<T>() : nullptr, partial.mutable_data_ptr<float>(), plan.rows,
      plan.cols, plan.rows_per_split);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The column sums of `a` (kTransform none) or of d pre (written to rows_out), into a new [cols] tensor.
template <RowTransform kTransform>
at::Tensor column_sums(const at::Tensor& a, const at::Tensor& dy, const at::Tensor& rows_out) {
  const c10::cuda::CUDAGuard on_device(a.device());
  const int64_t rows = a.size(0), cols = a.size(1);
  at::Tensor out = at::empty({cols}, a.options());
  if (cols == 0) return out;
  if (rows == 0) return out.zero_();
  bool aligned = aligned16(a);
  if (dy.defined()) aligned = aligned && aligned16(dy) && aligned16(rows_out);
  const ColumnSumPlan plan = plan_column_sums(rows, cols, a.element_size(), aligned,
                                              at::cuda::getCurrentDeviceProperties()->multiProcessorCount);
  at::Tensor partial = at::empty({plan.splits, cols}, a.options().dtype(at::kFloat));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, a.scalar_type(), "column_sums_cuda", [&] {  // double: refused above
    constexpr int kVector = Pack<scalar_t>::kCount;
    if (plan.pack == kVector) launch_partials<scalar_t, kVector, kTransform>(plan, a, dy, rows_out, partial);
    else launch_partials<scalar_t, 1, kTransform>(plan, a, dy, rows_out, partial);
    launch_sum_partials<scalar_t>(partial.const_data_ptr<float>(), out.mutable_data_ptr<scalar_t>(), plan.splits, cols);
  });
  return out;
}

}  // namespace

at::Tensor column_sums_cuda(const at::Tensor& grad) {
  check_operand(grad, grad, "grad");
  return column_sums<RowTransform::none>(grad, at::Tensor(), at::Tensor());
}

std::pair<at::Tensor, at::Tensor> gelu_backward_column_sums_cuda(const at::Tensor& pre, const at::Tensor& dy,
                                                                 bool tanh) {
  check_operand(pre, pre, "pre");
  check_operand(dy, pre, "dy");
  at::Tensor grad_pre = at::empty_like(pre);
  at::Tensor sums = tanh ? column_sums<RowTransform::gelu_tanh>(pre, dy, grad_pre)
                         : column_sums<RowTransform::gelu_erf>(pre, dy, grad_pre);
  return {grad_pre, sums};
}

}  // namespace segtrain::kernels
