#include "kernels/residual_norm_cuda.h"

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
#include "kernels/residual_norm_element.h"
#include "kernels/vector_pack.cuh"

namespace segtrain::kernels {

namespace {

// A row's threads: each holds up to K packs of 16 bytes in registers (K * 8 bf16 values), so a row
// of up to kNormThreads * 8 packs (kFusedNormRowBytes) is read from memory once.
constexpr int kNormThreads = 128;
constexpr int kWarps = kNormThreads / 32;
static_assert(kFusedNormRowBytes == kNormThreads * 8 * 16, "residual_norm_cuda.h's width is these kernels' registers");

// Sums of the block's values, the same in every thread: a butterfly within each warp, then the
// warps' sums in warp order (a fixed order: the same bits every run). `shared` holds kWarps
// values of each sum; the block must not reuse it before every thread has read it.
template <int M>
__device__ inline void block_sums(float (&v)[M], float (*shared)[kWarps]) {
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) v[m] += __shfl_xor_sync(0xffffffffu, v[m], offset);
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0)
#pragma unroll
    for (int m = 0; m < M; ++m) shared[m][warp] = v[m];
  __syncthreads();
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float s = shared[m][0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) s += shared[m][w];
    v[m] = s;
  }
}

template <typename T>
__device__ inline Pack<T> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T>*>(p);
}
template <typename T>
__device__ inline void store_pack(T* p, const Pack<T>& v) {
  *reinterpret_cast<Pack<T>*>(p) = v;
}
// A parameter's pack, or `fill` where it is undefined (no weight: 1, no bias: 0).
template <typename T>
__device__ inline void load_parameter(const T* p, int64_t at, float fill, float (&out)[Pack<T>::kCount]) {
#pragma unroll
  for (int i = 0; i < Pack<T>::kCount; ++i) out[i] = fill;
  if (p == nullptr) return;
  const Pack<T> v = load_pack(p + at);
#pragma unroll
  for (int i = 0; i < Pack<T>::kCount; ++i) out[i] = static_cast<float>(v.v[i]);
}

// One row a block: sum = x + branch rounded to T (the residual stream as the unfused add writes it),
// then the norm of the rounded sum from the values held in registers: LayerNorm (kCentered) or
// RMSNorm (its mean taken as 0: the root mean square, no bias).
template <typename T, int K, bool kCentered>
__global__ void __launch_bounds__(kNormThreads)
    add_norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ branch, const T* __restrict__ weight,
                                  const T* __restrict__ bias, T* __restrict__ sum, T* __restrict__ normed,
                                  float* __restrict__ mean_out, float* __restrict__ rstd_out, int64_t cols, float eps) {
  constexpr int N = Pack<T>::kCount;
  __shared__ float shared[1][kWarps];
  const int64_t row = blockIdx.x, packs = cols / N, base = row * cols;
  float v[K][N];
  float total[1] = {0.0f};
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t p = threadIdx.x + static_cast<int64_t>(k) * kNormThreads;
#pragma unroll
    for (int i = 0; i < N; ++i) v[k][i] = 0.0f;
    if (p >= packs) continue;
    const Pack<T> a = load_pack(x + base + p * N), b = load_pack(branch + base + p * N);
    Pack<T> s;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      s.v[i] = static_cast<T>(static_cast<float>(a.v[i]) + static_cast<float>(b.v[i]));
      v[k][i] = static_cast<float>(s.v[i]);
      total[0] += v[k][i];
    }
    store_pack(sum + base + p * N, s);
  }
  float mean = 0.0f;
  if constexpr (kCentered) {
    block_sums<1>(total, shared);
    mean = total[0] / static_cast<float>(cols);
    __syncthreads();  // every thread has read `shared`
  }
  float squares[1] = {0.0f};
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (threadIdx.x + static_cast<int64_t>(k) * kNormThreads >= packs) continue;
#pragma unroll
    for (int i = 0; i < N; ++i) squares[0] += (v[k][i] - mean) * (v[k][i] - mean);
  }
  block_sums<1>(squares, shared);
  const float rstd = rsqrtf(squares[0] / static_cast<float>(cols) + eps);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t p = threadIdx.x + static_cast<int64_t>(k) * kNormThreads;
    if (p >= packs) continue;
    float w[N], b[N];
    load_parameter(weight, p * N, 1.0f, w);
    load_parameter(bias, p * N, 0.0f, b);
    Pack<T> y;
#pragma unroll
    for (int i = 0; i < N; ++i) y.v[i] = static_cast<T>(layer_norm_output(v[k][i], mean, rstd, w[i], b[i]));
    store_pack(normed + base + p * N, y);
  }
  if (threadIdx.x == 0) {
    if constexpr (kCentered) mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// One row a block: d sum's inputs = the norm's input gradient from d normed, plus d sum (RMSNorm:
// mean and mean(g) taken as 0).
template <typename T, int K, bool kCentered>
__global__ void __launch_bounds__(kNormThreads)
    add_norm_backward_kernel(const T* __restrict__ d_normed, const T* __restrict__ d_sum, const T* __restrict__ sum,
                             const float* __restrict__ mean, const float* __restrict__ rstd,
                             const T* __restrict__ weight, T* __restrict__ dx, int64_t cols) {
  constexpr int N = Pack<T>::kCount;
  __shared__ float shared[2][kWarps];
  const int64_t row = blockIdx.x, packs = cols / N, base = row * cols;
  const float row_mean = kCentered ? mean[row] : 0.0f, row_rstd = rstd[row];
  float g[K][N], xhat[K][N];
  float sums[2] = {0.0f, 0.0f};  // of g and of g x^
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t p = threadIdx.x + static_cast<int64_t>(k) * kNormThreads;
#pragma unroll
    for (int i = 0; i < N; ++i) g[k][i] = xhat[k][i] = 0.0f;
    if (p >= packs) continue;
    const Pack<T> dy = load_pack(d_normed + base + p * N), s = load_pack(sum + base + p * N);
    float w[N];
    load_parameter(weight, p * N, 1.0f, w);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      g[k][i] = static_cast<float>(dy.v[i]) * w[i];
      xhat[k][i] = layer_norm_normalized(static_cast<float>(s.v[i]), row_mean, row_rstd);
      sums[0] += g[k][i];
      sums[1] += g[k][i] * xhat[k][i];
    }
  }
  if constexpr (kCentered) {
    block_sums<2>(sums, shared);
  } else {  // RMSNorm needs no mean(g)
    float gx[1] = {sums[1]};
    block_sums<1>(gx, shared);
    sums[1] = gx[0];
  }
  const float mean_g = kCentered ? sums[0] / static_cast<float>(cols) : 0.0f;
  const float mean_gx = sums[1] / static_cast<float>(cols);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t p = threadIdx.x + static_cast<int64_t>(k) * kNormThreads;
    if (p >= packs) continue;
    float direct[N];
    load_parameter(d_sum, base + p * N, 0.0f, direct);
    Pack<T> out;
#pragma unroll
    for (int i = 0; i < N; ++i)
      out.v[i] = static_cast<T>(layer_norm_input_gradient(g[k][i], xhat[k][i], mean_g, mean_gx, row_rstd, direct[i]));
    store_pack(dx + base + p * N, out);
  }
}

// One split of the rows of kColumnThreads packs of columns, as bias_gradient_cuda.cu's partials:
// thread (x, y) adds rows begin + y, begin + y + kRowThreads, ... of d normed x^ (d weight) and of
// d normed (d bias, kCentered only) in fp32, the block its kRowThreads sums in order of y. Without a
// mean (RMSNorm) x^ = s rstd and there is no bias.
template <typename T, int N, bool kCentered>
__global__ void __launch_bounds__(kColumnThreads* kRowThreads)
    norm_weight_partials_kernel(const T* __restrict__ d_normed, const T* __restrict__ sum,
                                const float* __restrict__ mean, const float* __restrict__ rstd,
                                float* __restrict__ partial_w, float* __restrict__ partial_b, int64_t rows,
                                int64_t cols, int64_t rows_per_split) {
  __shared__ float sums_w[kRowThreads][N][kColumnThreads];
  __shared__ float sums_b[kRowThreads][N][kColumnThreads];
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * kColumnThreads + threadIdx.x) * N;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * rows_per_split;
  const int64_t end = begin + rows_per_split < rows ? begin + rows_per_split : rows;
  float acc_w[N], acc_b[N];
#pragma unroll
  for (int i = 0; i < N; ++i) acc_w[i] = acc_b[i] = 0.0f;
  if (col < cols) {
#pragma unroll 4
    for (int64_t r = begin + threadIdx.y; r < end; r += kRowThreads) {
      const Pack<T, N> dy = *reinterpret_cast<const Pack<T, N>*>(d_normed + r * cols + col);
      const Pack<T, N> s = *reinterpret_cast<const Pack<T, N>*>(sum + r * cols + col);
      const float row_mean = kCentered ? mean[r] : 0.0f, row_rstd = rstd[r];
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const float d = static_cast<float>(dy.v[i]);
        acc_w[i] += d * layer_norm_normalized(static_cast<float>(s.v[i]), row_mean, row_rstd);
        if constexpr (kCentered) acc_b[i] += d;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < N; ++i) {
    sums_w[threadIdx.y][i][threadIdx.x] = acc_w[i];
    sums_b[threadIdx.y][i][threadIdx.x] = acc_b[i];
  }
  __syncthreads();
  if (threadIdx.y != 0 || col >= cols) return;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    float w = sums_w[0][i][threadIdx.x], b = sums_b[0][i][threadIdx.x];
    for (int y = 1; y < kRowThreads; ++y) w += sums_w[y][i][threadIdx.x], b += sums_b[y][i][threadIdx.x];
    partial_w[static_cast<int64_t>(blockIdx.y) * cols + col + i] = w;
    if constexpr (kCentered) partial_b[static_cast<int64_t>(blockIdx.y) * cols + col + i] = b;
  }
}

void check_operand(const at::Tensor& t, const at::Tensor& like, const char* name) {
  TORCH_CHECK(t.is_cuda() && t.is_contiguous() && t.scalar_type() == like.scalar_type() && t.sizes() == like.sizes(),
              "residual_norm_cuda: ", name, " must be a contiguous CUDA tensor of x's shape and dtype");
}

void check_parameter(const at::Tensor& t, const at::Tensor& like, const char* name) {
  if (!t.defined()) return;
  TORCH_CHECK(t.is_cuda() && t.is_contiguous() && t.scalar_type() == like.scalar_type() && t.dim() == 1 &&
                  t.size(0) == like.size(-1),
              "residual_norm_cuda: ", name, " must be a contiguous [D] CUDA tensor of x's dtype");
}

bool aligned16(const at::Tensor& t) {
  return !t.defined() || reinterpret_cast<std::uintptr_t>(t.const_data_ptr()) % 16 == 0;
}

void check_row(const at::Tensor& x) {
  const auto dtype = x.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf,
              "residual_norm_cuda: takes fp32, bf16 or fp16; got ", dtype);
  const int64_t cols = x.size(-1), bytes = cols * x.element_size();
  TORCH_CHECK(cols > 0 && bytes % 16 == 0 && bytes <= kFusedNormRowBytes,
              "residual_norm_cuda: a row must be a multiple of 16 bytes and at most ", kFusedNormRowBytes,
              " bytes; got ", cols, " elements of ", x.element_size());
  // One block a row: the grid's x dimension holds at most 2^31 - 1 blocks.
  TORCH_CHECK(x.numel() / cols <= int64_t{0x7fffffff}, "residual_norm_cuda: ", x.numel() / cols, " rows");
}

// mean (undefined for RMSNorm) and rstd: contiguous fp32 CUDA tensors of one value a row.
void check_statistics(const at::Tensor& mean, const at::Tensor& rstd, int64_t rows) {
  for (const at::Tensor* t : {&mean, &rstd})
    TORCH_CHECK((t == &mean && !t->defined()) || (t->is_cuda() && t->scalar_type() == at::kFloat &&
                                                   t->numel() == rows && t->is_contiguous()),
                "residual_norm_cuda: mean and rstd must be contiguous fp32 CUDA tensors of one value a row");
}

// At most K packs a thread: the smallest power of two that holds the row's packs.
int packs_per_thread(int64_t cols, int64_t element_size) {
  const int64_t packs = cols * element_size / 16;
  int k = 1;
  while (static_cast<int64_t>(k) * kNormThreads < packs) k *= 2;
  return k;
}

template <typename T>
const T* data_or_null(const at::Tensor& t) {
  return t.defined() ? t.const_data_ptr<T>() : nullptr;
}

// Calls f.template operator()<K, kCentered>() for the row's packs a thread and the norm.
template <bool kCentered, typename F>
void with_packs_per_thread(int k, F&& f) {
  switch (k) {
    case 1: f.template operator()<1, kCentered>(); break;
    case 2: f.template operator()<2, kCentered>(); break;
    case 4: f.template operator()<4, kCentered>(); break;
    default: f.template operator()<8, kCentered>(); break;
  }
}
template <typename F>
void with_row_kernel(int k, bool centered, F&& f) {
  if (centered) with_packs_per_thread<true>(k, f);
  else with_packs_per_thread<false>(k, f);
}

}  // namespace

AddNormForward add_norm_forward_cuda(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                                      const at::Tensor& bias, double eps, bool centered) {
  check_row(x);
  check_operand(x, x, "x");
  check_operand(branch, x, "branch");
  check_parameter(weight, x, "weight");
  check_parameter(bias, x, "bias");
  TORCH_CHECK(aligned16(x) && aligned16(branch) && aligned16(weight) && aligned16(bias),
              "residual_norm_cuda: tensors must start on 16-byte boundaries");
  const c10::cuda::CUDAGuard on_device(x.device());
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  TORCH_CHECK(centered || !bias.defined(), "residual_norm_cuda: RMSNorm takes no bias");
  AddNormForward out{at::empty_like(x), at::empty_like(x),
                     centered ? at::empty({rows}, x.options().dtype(at::kFloat)) : at::Tensor(),
                     at::empty({rows}, x.options().dtype(at::kFloat))};
  if (rows == 0) return out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "add_norm_forward_cuda", [&] {
    with_row_kernel(packs_per_thread(cols, x.element_size()), centered, [&]<int K, bool kCentered>() {
      add_norm_forward_kernel<scalar_t, K, kCentered>
          <<<static_cast<unsigned>(rows), kNormThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
              x.const_data_ptr<scalar_t>(), branch.const_data_ptr<scalar_t>(), data_or_null<scalar_t>(weight),
              data_or_null<scalar_t>(bias), out.sum.mutable_data_ptr<scalar_t>(),
              out.normed.mutable_data_ptr<scalar_t>(), centered ? out.mean.mutable_data_ptr<float>() : nullptr,
              out.rstd.mutable_data_ptr<float>(), cols, static_cast<float>(eps));
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return out;
}

at::Tensor add_norm_input_gradient_cuda(const at::Tensor& d_normed, const at::Tensor& d_sum, const at::Tensor& sum,
                                        const at::Tensor& mean, const at::Tensor& rstd, const at::Tensor& weight) {
  check_row(sum);
  check_operand(d_normed, sum, "d normed");
  if (d_sum.defined()) check_operand(d_sum, sum, "d sum");
  check_parameter(weight, sum, "weight");
  const int64_t cols = sum.size(-1), rows = sum.numel() / cols;
  check_statistics(mean, rstd, rows);
  const bool centered = mean.defined();
  TORCH_CHECK(aligned16(d_normed) && aligned16(d_sum) && aligned16(sum) && aligned16(weight),
              "residual_norm_cuda: tensors must start on 16-byte boundaries");
  const c10::cuda::CUDAGuard on_device(sum.device());
  at::Tensor dx = at::empty_like(sum);
  if (rows == 0) return dx;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, sum.scalar_type(), "add_norm_backward_cuda", [&] {
    with_row_kernel(packs_per_thread(cols, sum.element_size()), centered, [&]<int K, bool kCentered>() {
      add_norm_backward_kernel<scalar_t, K, kCentered>
          <<<static_cast<unsigned>(rows), kNormThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
              d_normed.const_data_ptr<scalar_t>(), data_or_null<scalar_t>(d_sum), sum.const_data_ptr<scalar_t>(),
              data_or_null<float>(mean), rstd.const_data_ptr<float>(), data_or_null<scalar_t>(weight),
              dx.mutable_data_ptr<scalar_t>(), cols);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return dx;
}

std::pair<at::Tensor, at::Tensor> norm_weight_gradients_cuda(const at::Tensor& d_normed, const at::Tensor& sum,
                                                             const at::Tensor& mean, const at::Tensor& rstd) {
  check_row(sum);
  check_operand(d_normed, sum, "d normed");
  const int64_t cols = sum.size(-1), rows = sum.numel() / cols;
  check_statistics(mean, rstd, rows);
  const c10::cuda::CUDAGuard on_device(sum.device());
  const bool centered = mean.defined();
  at::Tensor d_weight = at::empty({cols}, sum.options());
  at::Tensor d_bias = centered ? at::empty({cols}, sum.options()) : at::Tensor();
  if (rows == 0) return {d_weight.zero_(), centered ? d_bias.zero_() : d_bias};
  const bool aligned = aligned16(d_normed) && aligned16(sum);
  const ColumnSumPlan plan = plan_column_sums(rows, cols, sum.element_size(), aligned,
                                              at::cuda::getCurrentDeviceProperties()->multiProcessorCount);
  at::Tensor partial = at::empty({centered ? 2 : 1, plan.splits, cols}, sum.options().dtype(at::kFloat));
  float* partial_w = partial.mutable_data_ptr<float>();
  float* partial_b = centered ? partial_w + plan.splits * cols : nullptr;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, sum.scalar_type(), "norm_weight_gradients_cuda", [&] {
    const dim3 grid(static_cast<unsigned>(plan.column_tiles), static_cast<unsigned>(plan.splits));
    const dim3 block(kColumnThreads, kRowThreads);
    constexpr int kVector = Pack<scalar_t>::kCount;
    auto launch = [&]<int N, bool kCentered>() {
      norm_weight_partials_kernel<scalar_t, N, kCentered><<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
          d_normed.const_data_ptr<scalar_t>(), sum.const_data_ptr<scalar_t>(), data_or_null<float>(mean),
          rstd.const_data_ptr<float>(), partial_w, partial_b, plan.rows, plan.cols, plan.rows_per_split);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    if (plan.pack == kVector) {
      if (centered) launch.template operator()<kVector, true>();
      else launch.template operator()<kVector, false>();
    } else {
      if (centered) launch.template operator()<1, true>();
      else launch.template operator()<1, false>();
    }
    // One launch for both sums (the partials of d bias follow those of d weight in `partial`).
    launch_sum_partials<scalar_t>(partial_w, d_weight.mutable_data_ptr<scalar_t>(), plan.splits, cols,
                                  centered ? d_bias.mutable_data_ptr<scalar_t>() : nullptr);
  });
  return {d_weight, d_bias};
}

}  // namespace segtrain::kernels
