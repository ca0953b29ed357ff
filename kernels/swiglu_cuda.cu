#include "kernels/swiglu_cuda.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContextLight.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdint>

#include "kernels/swiglu_element.h"
#include "kernels/vector_pack.cuh"

namespace segtrain::kernels {

namespace {

constexpr int kThreads = 256;

// Forward: out = silu(gate) * up. The first `packs` packs of 16 bytes go vectorised, the elements
// after them (fewer than a pack) one by one; a grid-stride loop covers any size.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    swiglu_kernel(const T* __restrict__ gate, const T* __restrict__ up, T* __restrict__ out, int64_t n) {
  constexpr int k = Pack<T>::kCount;
  const int64_t packs = n / k;
  const GridStride at = grid_stride();
  for (int64_t p = at.first; p < packs; p += at.stride) {
    const Pack<T> g = reinterpret_cast<const Pack<T>*>(gate)[p];
    const Pack<T> u = reinterpret_cast<const Pack<T>*>(up)[p];
    Pack<T> o;
#pragma unroll
    for (int i = 0; i < k; ++i) o.v[i] = static_cast<T>(swiglu_value(static_cast<float>(g.v[i]), static_cast<float>(u.v[i])));
    reinterpret_cast<Pack<T>*>(out)[p] = o;
  }
  for (int64_t j = packs * k + at.first; j < n; j += at.stride)
    out[j] = static_cast<T>(swiglu_value(static_cast<float>(gate[j]), static_cast<float>(up[j])));
}

// Backward: d gate and d up from one read of gate, up and the output's gradient.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    swiglu_backward_kernel(const T* __restrict__ gate, const T* __restrict__ up, const T* __restrict__ grad,
                           T* __restrict__ grad_gate, T* __restrict__ grad_up, int64_t n) {
  constexpr int k = Pack<T>::kCount;
  const int64_t packs = n / k;
  const GridStride at = grid_stride();
  for (int64_t p = at.first; p < packs; p += at.stride) {
    const Pack<T> g = reinterpret_cast<const Pack<T>*>(gate)[p];
    const Pack<T> u = reinterpret_cast<const Pack<T>*>(up)[p];
    const Pack<T> d = reinterpret_cast<const Pack<T>*>(grad)[p];
    Pack<T> dg, du;
#pragma unroll
    for (int i = 0; i < k; ++i) {
      const SwigluGradient r =
          swiglu_gradient(static_cast<float>(g.v[i]), static_cast<float>(u.v[i]), static_cast<float>(d.v[i]));
      dg.v[i] = static_cast<T>(r.gate);
      du.v[i] = static_cast<T>(r.up);
    }
    reinterpret_cast<Pack<T>*>(grad_gate)[p] = dg;
    reinterpret_cast<Pack<T>*>(grad_up)[p] = du;
  }
  for (int64_t j = packs * k + at.first; j < n; j += at.stride) {
    const SwigluGradient r =
        swiglu_gradient(static_cast<float>(gate[j]), static_cast<float>(up[j]), static_cast<float>(grad[j]));
    grad_gate[j] = static_cast<T>(r.gate);
    grad_up[j] = static_cast<T>(r.up);
  }
}

// Enough blocks to fill the device a few times over; the loops stride over the rest.
unsigned blocks_for(int64_t n, int64_t per_thread) {
  const int64_t wanted = (n / per_thread + kThreads - 1) / kThreads;
  const int64_t most = int64_t{32} * at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  return static_cast<unsigned>(std::clamp<int64_t>(wanted, 1, most));
}

void check_operand(const at::Tensor& t, const at::Tensor& gate, const char* name) {
  TORCH_CHECK(t.is_cuda() && t.is_contiguous() && t.scalar_type() == gate.scalar_type() && t.sizes() == gate.sizes(),
              "swiglu_cuda: ", name, " must be a contiguous CUDA tensor of gate's shape and dtype");
  // The caching allocator's blocks are 512-byte aligned; a view that starts inside one may not be.
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.const_data_ptr()) % 16 == 0,
              "swiglu_cuda: ", name, " must start on a 16-byte boundary");
}

}  // namespace

at::Tensor swiglu_cuda(const at::Tensor& gate, const at::Tensor& up) {
  check_operand(gate, gate, "gate");
  check_operand(up, gate, "up");
  const c10::cuda::CUDAGuard on_device(gate.device());
  at::Tensor out = at::empty_like(gate);
  const int64_t n = gate.numel();
  if (n == 0) return out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, gate.scalar_type(), "swiglu_cuda", [&] {
    swiglu_kernel<scalar_t><<<blocks_for(n, Pack<scalar_t>::kCount), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        gate.const_data_ptr<scalar_t>(), up.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(), n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

std::pair<at::Tensor, at::Tensor> swiglu_backward_cuda(const at::Tensor& gate, const at::Tensor& up,
                                                       const at::Tensor& grad) {
  check_operand(gate, gate, "gate");
  check_operand(up, gate, "up");
  check_operand(grad, gate, "grad");
  const c10::cuda::CUDAGuard on_device(gate.device());
  at::Tensor grad_gate = at::empty_like(gate), grad_up = at::empty_like(gate);
  const int64_t n = gate.numel();
  if (n == 0) return {grad_gate, grad_up};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, gate.scalar_type(), "swiglu_backward_cuda", [&] {
    swiglu_backward_kernel<scalar_t>
        <<<blocks_for(n, Pack<scalar_t>::kCount), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
            gate.const_data_ptr<scalar_t>(), up.const_data_ptr<scalar_t>(), grad.const_data_ptr<scalar_t>(),
            grad_gate.mutable_data_ptr<scalar_t>(), grad_up.mutable_data_ptr<scalar_t>(), n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {grad_gate, grad_up};
}

}  // namespace segtrain::kernels
