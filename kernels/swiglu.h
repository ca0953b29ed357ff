#pragma once
// SwiGLU's gate, silu(gate) * up: one home for the call every Llama-family MLP makes
// (models/modules/llama_block.cpp).
#include <ATen/ATen.h>

namespace segtrain::kernels {

// silu(gate) * up. ATen's composite makes silu(gate) (a pass over the [tokens, d_ff] gate, kept
// for the product's backward) and then the product (another), and its backward three passes of
// two inputs each. On a CUDA device with fused kernels (the default), where gate and up share a
// floating dtype and shape, one kernel reads gate and up once and writes the product, computed in
// fp32 and rounded once (the composite rounds silu(gate) and the product's gradient on the way: the
// tests hold the two within three units in the last place, and of the largest gradient near 0),
// and one kernel the two gradients from one read of gate, up and the output's gradient; nothing
// but gate and up is kept for backward.
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);

// The kernels as one autograd node, whatever the switch says (swiglu() takes it where it applies;
// the gpu suite tests it against the composite). InputError where it does not apply, saying why.
at::Tensor swiglu_fused(const at::Tensor& gate, const at::Tensor& up);

// ATen's composite, the CPU's path and the reference: at::silu(gate) * up.
at::Tensor swiglu_composite(const at::Tensor& gate, const at::Tensor& up);

}  // namespace segtrain::kernels
