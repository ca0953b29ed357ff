#include "kernels/rope.h"

#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include "common/error.h"
#include "kernels/forward_paths.h"
#include "kernels/fused_kernels.h"
#if SEGTRAIN_WITH_CUDA
#include "kernels/rope_cuda.h"
#endif

namespace segtrain::kernels {

namespace {

at::Tensor rotate_half(const at::Tensor& x) {
  auto halves = x.chunk(2, -1);
  return at::cat({-halves[1], halves[0]}, -1);
}

#if SEGTRAIN_WITH_CUDA
// The kernel's output dtype: what the composite would return, or under autocast x's own
// (rope.h says why).
at::ScalarType fused_dtype(const at::Tensor& x) {
  if (at::autocast::is_autocast_enabled(x.device().type())) return x.scalar_type();
  return at::promote_types(x.scalar_type(), at::kFloat);
}

// The kernel where it applies: a CUDA tensor of a floating type, fp32 angles that
// carry no gradient (positions never do; a caller differentiating the angles gets the
// composite's autograd).
bool fused_applies(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  if (!x.is_cuda() || x.dim() != 4 || cos.dim() != 4) return false;
  const auto t = x.scalar_type();
  if (t != at::kFloat && t != at::kBFloat16 && t != at::kHalf) return false;
  for (const auto* angle : {&cos, &sin})
    if (angle->scalar_type() != at::kFloat || angle->requires_grad() || !angle->is_cuda()) return false;
  const int64_t rd = cos.size(-1);
  return rd % 2 == 0 && rd <= x.size(-1) && cos.sizes() == sin.sizes() && cos.size(1) == 1 &&
         cos.size(2) == x.size(2) && (cos.size(0) == 1 || cos.size(0) == x.size(0));
}

class FusedRope : public torch::autograd::Function<FusedRope> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    return rope_cuda(x, cos, sin, /*transposed=*/false, fused_dtype(x));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    // The rotation is orthogonal: its gradient is the transposed rotation of the
    // output's gradient, returned in x's dtype as autograd expects.
    return {rope_cuda(grads[0], saved[0], saved[1], /*transposed=*/true, x_dtype), at::Tensor(), at::Tensor()};
  }
};
#endif

}  // namespace

at::Tensor rope_composite(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t rd = cos.size(-1);
  auto rot = x.narrow(-1, 0, rd);
  auto rotated = rot * cos + rotate_half(rot) * sin;
  if (rd == x.size(-1)) return rotated;
  auto pass = x.narrow(-1, rd, x.size(-1) - rd);
  return at::cat({rotated, pass.to(rotated.scalar_type())}, -1);
}

at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
#if SEGTRAIN_WITH_CUDA
  if (fused_kernels_requested() && fused_applies(x, cos, sin)) {
    record_path(ForwardPath::rope_fused);
    return rope_fused(x, cos, sin);
  }
#endif
  record_path(ForwardPath::rope_composite);
  return rope_composite(x, cos, sin);
}

at::Tensor rope_fused(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
#if SEGTRAIN_WITH_CUDA
  if (!fused_applies(x, cos, sin))
    throw InputError("the fused RoPE kernel takes CUDA tensors of rank 4 (x float/bf16/fp16, angles fp32 without "
                     "gradient); got x on " + x.device().str() + ": the composite serves this call");
  return FusedRope::apply(x, cos.contiguous(), sin.contiguous());
#else
  throw InputError("the fused RoPE kernel needs a CUDA build of segtrain");
#endif
}

}  // namespace segtrain::kernels
