#include "kernels/cross_entropy_cuda.h"

#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cub/block/block_reduce.cuh>

#include "kernels/cross_entropy_element.h"

namespace segtrain::kernels {

namespace {

constexpr int kThreads = 512;  // a row of 50k-128k logits: about 100-250 a thread

struct MergePartials {
  __device__ SoftmaxPartial operator()(const SoftmaxPartial& a, const SoftmaxPartial& b) const {
    return softmax_partial_merge(a, b);
  }
};

// One block a row: the threads fold strided logits into partials (coalesced reads), the block
// merges them; thread 0 writes the row's nll; with `gradient` the row is read again (mostly
// from L2: a 50k-vocabulary bf16 row is 100 KB) and overwritten by its gradient. A row whose
// target is ignored is zeroed without being read.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_kernel(T* __restrict__ logits, const int64_t* __restrict__ targets, float* __restrict__ nll,
                         int64_t vocab, int64_t row_stride, int64_t ignore_index, bool gradient) {
  using BlockReduce = cub::BlockReduce<SoftmaxPartial, kThreads>;
  __shared__ typename BlockReduce::TempStorage reduce_storage;
  __shared__ SoftmaxRow row_softmax;
  T* x = logits + static_cast<int64_t>(blockIdx.x) * row_stride;
  const int64_t target = targets[blockIdx.x];
  if (target == ignore_index) {  // the whole block alike: no reduction to join
    if (threadIdx.x == 0) nll[blockIdx.x] = 0.0f;
    if (gradient)
      for (int64_t j = threadIdx.x; j < vocab; j += kThreads) x[j] = static_cast<T>(0.0f);
    return;
  }
  SoftmaxPartial partial = softmax_partial_empty();
  for (int64_t j = threadIdx.x; j < vocab; j += kThreads) partial = softmax_partial_add(partial, static_cast<float>(x[j]));
  const SoftmaxPartial whole = BlockReduce(reduce_storage).Reduce(partial, MergePartials{});  // valid in thread 0
  if (threadIdx.x == 0) {
    row_softmax = softmax_row(whole);
    const bool in_range = target >= 0 && target < vocab;
    nll[blockIdx.x] = in_range ? cross_entropy_nll(static_cast<float>(x[target]), row_softmax) : NAN;
  }
  if (!gradient) return;
  __syncthreads();  // row_softmax written, and x[target] read before any thread overwrites it
  const SoftmaxRow softmax = row_softmax;
  for (int64_t j = threadIdx.x; j < vocab; j += kThreads)
    x[j] = static_cast<T>(cross_entropy_gradient(static_cast<float>(x[j]), softmax, j == target));
}

}  // namespace

at::Tensor cross_entropy_cuda(at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index, bool gradient) {
  TORCH_CHECK(logits.is_cuda() && logits.dim() == 2 && logits.stride(1) == 1 &&
                  (logits.size(0) <= 1 || logits.stride(0) >= logits.size(1)),
              "cross_entropy_cuda: expected CUDA logits [rows, vocab] with rows of unit stride, at least vocab apart");
  TORCH_CHECK(targets.is_cuda() && targets.scalar_type() == at::kLong && targets.dim() == 1 &&
                  targets.is_contiguous() && targets.size(0) == logits.size(0),
              "cross_entropy_cuda: expected contiguous int64 CUDA targets [rows]");
  const c10::cuda::CUDAGuard on_device(logits.device());
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  at::Tensor nll = at::empty({rows}, logits.options().dtype(at::kFloat));
  if (rows == 0) return nll;
  TORCH_CHECK(vocab > 0 && rows <= int64_t{0x7fffffff}, "cross_entropy_cuda: ", rows, " rows of ", vocab, " logits");
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, logits.scalar_type(), "cross_entropy_cuda", [&] {
    cross_entropy_kernel<scalar_t><<<static_cast<unsigned>(rows), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        logits.mutable_data_ptr<scalar_t>(), targets.const_data_ptr<int64_t>(), nll.mutable_data_ptr<float>(), vocab,
        rows > 1 ? logits.stride(0) : vocab, ignore_index, gradient);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return nll;
}

}  // namespace segtrain::kernels
