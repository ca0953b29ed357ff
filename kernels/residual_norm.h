#pragma once
// The residual add and the norm that reads its sum, h = x + branch and norm(h): one home for the pair
// every sequential-residual block computes twice (GPT-2's blocks with LayerNorm,
// models/modules/transformer.cpp; the Llama family's with RMSNorm, llama_block.cpp): the attention's
// output added as ln2 reads the sum, and the previous block's MLP output added as ln1 (or the final
// norm) reads it (models/modules/llama_block.h's Residual carries that branch from block to block).
//
// Apart, the add reads x and branch and writes h, the norm reads h again, and in backward the norm's
// input gradient is written and then added to the gradient h takes from the rest of the network in
// one more pass (autograd's sum of h's two uses). On a CUDA device with SEGTRAIN_FUSED_KERNELS=all
// (the kernels no GPU has run yet: kernels/fused_kernels.h), where x, branch, weight and bias share
// a floating dtype and a row fits the kernels' registers, one autograd node does both: forward one
// block a row reads x and branch once, writes h (rounded as the add rounds it) and the norm of the
// rounded h (residual_norm_cuda.cu, kernels/residual_norm_element.h); backward one block a row writes
// the sum of both gradients of h, rounded once, and the weight's and bias's gradients are
// deterministic column sums (bias_gradient_plan.h's order). Computed from the passes, not measured:
// the forward's 5 row-sized passes become 4 (h is not read again), the backward's 8 become 6 (the
// norm's gradient is not written and read back to be added), and two kernels a block fewer.
// Elsewhere, the add and kernels/layer_norm.h's or kernels/rms_norm.h's call, as before.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "kernels/layer_norm.h"          // NormReader
#include "kernels/residual_norm_cuda.h"  // kFusedNormRowBytes (its functions are defined in CUDA builds only)

namespace segtrain::kernels {

struct ResidualNorm {
  at::Tensor sum;     // x + branch: the residual stream
  at::Tensor normed;  // the norm of sum
};

// LayerNorm(sum), read by `reader` (kernels/layer_norm.h; the fused node only where a matmul reads it,
// as its result keeps x's dtype). An undefined branch adds nothing: {x, the norm of x} (a first block).
ResidualNorm add_layer_norm(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                            const at::Tensor& bias, double eps, NormReader reader);
// RMSNorm(sum) as kernels/rms_norm.h computes it; an undefined branch as above.
ResidualNorm add_rms_norm(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight, double eps);

// Why the fused node does not take these tensors ("" when it does), on any device: shapes that
// differ, dtypes or devices that differ or a dtype that is not floating, parameters that are not
// [D], a row that is no multiple of 16 bytes or wider than kFusedNormRowBytes (bias undefined for
// RMSNorm).
std::string add_norm_fused_refusal(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                                   const at::Tensor& bias);

// The node, whatever the switch and the device say (add_layer_norm() and add_rms_norm() take it on
// CUDA where it applies; the CPU tests its wiring, with ATen's LayerNorm and its backward, or
// RMSNorm's formula in fp32 ATen ops, standing in for the kernels; the gpu suite the kernels). Its
// normed output is in x's dtype, outside autocast, rounded once. InputError where
// add_norm_fused_refusal says why not.
ResidualNorm add_layer_norm_fused(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                                  const at::Tensor& bias, double eps);
ResidualNorm add_rms_norm_fused(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight, double eps);

// While one lives, on this thread add_layer_norm() and add_rms_norm() take the node wherever it applies,
// the CPU included (where ATen's ops stand in for the kernels) and whatever the switch says: so that a
// CPU test holds a whole model's wiring of it (which tensors each node adds and normalises) to the
// composites'. Nothing but tests makes one. The flag is this thread's: on the CPU backward (and so an
// activation checkpoint's recomputation) runs on it, on a GPU on autograd's device threads.
class NodeEverywhereForTests {
 public:
  NodeEverywhereForTests();
  ~NodeEverywhereForTests();
  NodeEverywhereForTests(const NodeEverywhereForTests&) = delete;
  NodeEverywhereForTests& operator=(const NodeEverywhereForTests&) = delete;

 private:
  bool before_;
};

}  // namespace segtrain::kernels
