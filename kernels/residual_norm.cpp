#include "kernels/residual_norm.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>

#include <cstdint>
#include <optional>
#include <tuple>

#include "common/error.h"
#include "kernels/forward_paths.h"
#include "kernels/fused_kernels.h"
#if SEGTRAIN_WITH_CUDA
#include "kernels/residual_norm_cuda.h"
#endif

namespace segtrain::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool floating(at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf; }

#if SEGTRAIN_WITH_CUDA
// What the kernels read: contiguous, starting on a 16-byte boundary (a parameter in a flat bucket
// may start elsewhere: its copy does not). Undefined stays undefined.
at::Tensor for_kernel(const at::Tensor& t) {
  if (!t.defined()) return t;
  at::Tensor c = t.contiguous();
  if (reinterpret_cast<std::uintptr_t>(c.const_data_ptr()) % 16 != 0) c = c.clone();
  return c;
}
#endif

struct Forward {
  at::Tensor sum, normed, mean, rstd;
};

// On a CUDA tensor of a CUDA build the fused kernel; elsewhere ATen's add and LayerNorm, which the
// CPU tests hold the node's wiring to.
Forward forward_pass(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight, const at::Tensor& bias,
                     double eps) {
#if SEGTRAIN_WITH_CUDA
  if (x.is_cuda()) {
    auto f = add_layer_norm_forward_cuda(for_kernel(x), for_kernel(branch), for_kernel(weight), for_kernel(bias), eps);
    return {f.sum, f.normed, f.mean, f.rstd};
  }
#endif
  const at::Tensor sum = at::add(x, branch);
  auto [normed, mean, rstd] = at::native_layer_norm(sum, {sum.size(-1)}, weight, bias, eps);
  return {sum, normed, mean, rstd};
}

// The kernels' results carry no graph of their own: a backward that records one (create_graph)
// would get a wrong one. Nothing in segtrain asks for it.
void refuse_double_backward() {
  TORCH_CHECK(!at::GradMode::is_enabled(),
              "the fused residual add and LayerNorm (SEGTRAIN_FUSED_KERNELS=all) has no second derivative; "
              "SEGTRAIN_FUSED_KERNELS=1 takes ATen's add and LayerNorm");
}

// An absent weight or bias (undefined) as autograd's Function takes it: no input at all.
std::optional<at::Tensor> optional(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// Inputs x, branch, weight and bias (either may be absent), eps; outputs sum and normed.
class AddLayerNormNode : public torch::autograd::Function<AddLayerNormNode> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& branch,
                               const std::optional<at::Tensor>& weight_input,
                               const std::optional<at::Tensor>& bias_input, double eps) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const at::Tensor weight = weight_input.value_or(at::Tensor()), bias = bias_input.value_or(at::Tensor());
    const Forward f = forward_pass(x, branch, weight, bias, eps);
    // An unused output's gradient stays undefined (no zeros made): sum alone, normed alone.
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({f.sum, weight, bias, f.mean, f.rstd});
    return {f.sum, f.normed};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    refuse_double_backward();
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &sum = saved[0], &weight = saved[1], &bias = saved[2], &mean = saved[3], &rstd = saved[4];
    const at::Tensor& d_sum = grads[0];
    const at::Tensor& d_normed = grads[1];
    // needs_input_grad counts the tensors given: an absent weight moves the bias's index.
    const bool wants_x = ctx->needs_input_grad(0) || ctx->needs_input_grad(1);
    const bool wants_w = weight.defined() && ctx->needs_input_grad(2);
    const bool wants_b = bias.defined() && ctx->needs_input_grad(weight.defined() ? 3 : 2);
    at::Tensor dx, dw, db;
    if (!d_normed.defined()) {
      dx = d_sum;  // the norm's output was not used: h's gradient is what reached it directly
    } else {
#if SEGTRAIN_WITH_CUDA
      if (sum.is_cuda()) {
        const at::Tensor dy = for_kernel(d_normed);
        if (wants_x) dx = add_layer_norm_input_gradient_cuda(dy, for_kernel(d_sum), sum, mean, rstd, for_kernel(weight));
        if (wants_w || wants_b) std::tie(dw, db) = layer_norm_weight_gradients_cuda(dy, sum, mean, rstd);
      } else  // NOLINT(readability-misleading-indentation): the CPU's path follows
#endif
      {
        std::tie(dx, dw, db) = at::native_layer_norm_backward(d_normed, sum, {sum.size(-1)}, mean, rstd, weight, bias,
                                                              {wants_x, wants_w, wants_b});
        if (wants_x && d_sum.defined()) dx = dx + d_sum;
      }
    }
    // x and branch take the same gradient (the add's backward), as ATen's add returns it.
    return {ctx->needs_input_grad(0) ? dx : at::Tensor(), ctx->needs_input_grad(1) ? dx : at::Tensor(),
            wants_w ? dw : at::Tensor(), wants_b ? db : at::Tensor(), at::Tensor()};
  }
};

bool takes_fused(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight, const at::Tensor& bias,
                 NormReader reader) {
  // Its normed output keeps x's dtype: a 16-bit one only where a matmul reads it (kernels/layer_norm.h).
  return SEGTRAIN_WITH_CUDA && untested_kernels_requested() && reader == NormReader::matmul && x.is_cuda() &&
         add_layer_norm_fused_refusal(x, branch, weight, bias).empty();
}

}  // namespace

std::string add_layer_norm_fused_refusal(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                                         const at::Tensor& bias) {
  if (!x.defined() || !branch.defined()) return "it takes a defined x and branch";
  if (x.dim() < 1 || x.sizes() != branch.sizes()) return "it takes x and branch of one shape [..., D]";
  const auto t = x.scalar_type();
  if (!floating(t)) return std::string("it takes fp32, bf16 or fp16; got ") + c10::toString(t);
  for (const at::Tensor* p : {&branch, &weight, &bias})
    if (p->defined() && (p->scalar_type() != t || p->device() != x.device()))
      return std::string("it takes x, branch, weight and bias of one dtype and device; x is ") + c10::toString(t) +
             ", another " + c10::toString(p->scalar_type());
  const int64_t d = x.size(-1);
  for (const at::Tensor* p : {&weight, &bias})
    if (p->defined() && (p->dim() != 1 || p->size(0) != d)) return "it takes weight and bias of x's last dimension";
  const int64_t bytes = d * static_cast<int64_t>(c10::elementSize(t));
  if (d == 0 || bytes % 16 != 0 || bytes > kFusedNormRowBytes)
    return "its kernels take rows of a multiple of 16 bytes up to " + std::to_string(kFusedNormRowBytes) + "; got " +
           std::to_string(d) + " values of " + std::to_string(c10::elementSize(t)) + " bytes";
  return "";
}

ResidualNorm add_layer_norm_fused(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                                  const at::Tensor& bias, double eps) {
  if (const std::string why = add_layer_norm_fused_refusal(x, branch, weight, bias); !why.empty())
    throw InputError("the fused residual add and LayerNorm does not apply: " + why);
  const auto out = AddLayerNormNode::apply(x, branch, optional(weight), optional(bias), eps);
  return {out[0], out[1]};
}

ResidualNorm add_layer_norm(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                            const at::Tensor& bias, double eps, NormReader reader) {
  if (takes_fused(x, branch, weight, bias, reader)) {
    record_path(ForwardPath::residual_layer_norm_kernel);
    const auto out = AddLayerNormNode::apply(x, branch, optional(weight), optional(bias), eps);
    return {out[0], out[1]};
  }
  at::Tensor sum = x + branch;
  return {sum, layer_norm(sum, weight, bias, eps, reader)};
}

}  // namespace segtrain::kernels
