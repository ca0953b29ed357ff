#include "kernels/rope_cuda.h"

#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "kernels/rope_element.h"

namespace segtrain::kernels {

namespace {

struct RopeShape {
  int64_t heads, tokens, dims, rotated_dims;
  int64_t in_stride[4];        // of `in`, by dimension (b, h, t, d)
  int64_t angle_batch_stride;  // 0 when the batch shares the angles
};

// One thread per output element: the output is contiguous, the input any strides.
template <typename In, typename Out>
__global__ void rope_kernel(const In* __restrict__ in, const float* __restrict__ cos, const float* __restrict__ sin,
                            Out* __restrict__ out, int64_t total, RopeShape s, bool transposed) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= total) return;
  const int64_t d = n % s.dims;
  const int64_t t = (n / s.dims) % s.tokens;
  const int64_t h = (n / (s.dims * s.tokens)) % s.heads;
  const int64_t b = n / (s.dims * s.tokens * s.heads);
  const In* row = in + b * s.in_stride[0] + h * s.in_stride[1] + t * s.in_stride[2];
  const float x = static_cast<float>(row[d * s.in_stride[3]]);
  if (d >= s.rotated_dims) {
    out[n] = static_cast<Out>(x);
    return;
  }
  const float y = static_cast<float>(row[rope_partner(d, s.rotated_dims) * s.in_stride[3]]);
  const int64_t angle = b * s.angle_batch_stride + t * s.rotated_dims;
  out[n] = static_cast<Out>(rope_element(x, y, cos + angle, sin + angle, d, s.rotated_dims, transposed));
}

template <typename In, typename Out>
void launch(const at::Tensor& in, const at::Tensor& cos, const at::Tensor& sin, at::Tensor& out, const RopeShape& s,
            bool transposed) {
  const int64_t total = out.numel();
  constexpr int threads = 256;
  const int64_t blocks = (total + threads - 1) / threads;
  rope_kernel<In, Out><<<static_cast<unsigned>(blocks), threads, 0, at::cuda::getCurrentCUDAStream()>>>(
      in.const_data_ptr<In>(), cos.const_data_ptr<float>(), sin.const_data_ptr<float>(), out.mutable_data_ptr<Out>(),
      total, s, transposed);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

at::Tensor rope_cuda(const at::Tensor& in, const at::Tensor& cos, const at::Tensor& sin, bool transposed,
                     at::ScalarType out_dtype) {
  TORCH_CHECK(in.is_cuda() && in.dim() == 4, "rope_cuda: expected a 4-D CUDA tensor");
  TORCH_CHECK(cos.is_contiguous() && sin.is_contiguous() && cos.scalar_type() == at::kFloat &&
                  sin.scalar_type() == at::kFloat,
              "rope_cuda: expected contiguous fp32 angles");
  TORCH_CHECK(cos.device() == in.device() && sin.device() == in.device(), "rope_cuda: angles on another device");
  // The stream and the allocation below are in's device's, whichever device is current.
  const c10::cuda::CUDAGuard on_device(in.device());
  auto out = at::empty(in.sizes(), in.options().dtype(out_dtype));
  if (out.numel() == 0) return out;
  RopeShape s{in.size(1), in.size(2), in.size(3), cos.size(-1), {in.stride(0), in.stride(1), in.stride(2), in.stride(3)},
              cos.size(0) == 1 ? 0 : in.size(2) * cos.size(-1)};
  // Same-dtype in and out, or either side fp32 (the composite's promoted result and its gradient).
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, in.scalar_type(), "rope_cuda_in", [&] {
    using In = scalar_t;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, out_dtype, "rope_cuda_out", [&] {
      launch<In, scalar_t>(in, cos, sin, out, s, transposed);
    });
  });
  return out;
}

}  // namespace segtrain::kernels
