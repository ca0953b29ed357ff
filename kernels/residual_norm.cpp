#include "kernels/residual_norm.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <utility>

#include "common/error.h"
#include "kernels/forward_paths.h"
#include "kernels/fused_kernels.h"
#include "kernels/rms_norm.h"

namespace segtrain::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

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
  at::Tensor sum, normed, mean, rstd;  // no mean for RMSNorm
};

// RMSNorm of the rounded sum on the CPU, as the kernel computes it: fp32, rounded once.
Forward rms_norm_forward_on_host(const at::Tensor& sum, const at::Tensor& weight, double eps) {
  const at::Tensor s = sum.to(at::kFloat);
  const at::Tensor rstd = at::rsqrt(s.square().mean(-1, /*keepdim=*/true) + eps);
  const at::Tensor normed = weight.defined() ? s * rstd * weight.to(at::kFloat) : s * rstd;
  return {sum, normed.to(sum.scalar_type()), at::Tensor(), rstd};
}

// On a CUDA tensor of a CUDA build the fused kernel; elsewhere ATen's add and LayerNorm (or the
// RMSNorm above), which the CPU tests hold the node's wiring to.
Forward forward_pass(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight, const at::Tensor& bias,
                     double eps, bool centered) {
#if SEGTRAIN_WITH_CUDA
  if (x.is_cuda()) {
    auto f = add_norm_forward_cuda(for_kernel(x), for_kernel(branch), for_kernel(weight), for_kernel(bias), eps,
                                   centered);
    return {f.sum, f.normed, f.mean, f.rstd};
  }
#endif
  const at::Tensor sum = at::add(x, branch);
  if (!centered) return rms_norm_forward_on_host(sum, weight, eps);
  auto [normed, mean, rstd] = at::native_layer_norm(sum, {sum.size(-1)}, weight, bias, eps);
  return {sum, normed, mean, rstd};
}

// RMSNorm's input gradient (plus d sum, rounded once) and its weight's on the CPU, in fp32 with the
// kernels' formula (residual_norm_element.h, mean and mean(g) taken as 0): ATen has no CPU kernel
// for its fused RMSNorm's backward.
std::pair<at::Tensor, at::Tensor> rms_norm_backward_on_host(const at::Tensor& d_normed, const at::Tensor& d_sum,
                                                            const at::Tensor& sum, const at::Tensor& rstd,
                                                            const at::Tensor& weight, bool wants_x, bool wants_w) {
  const at::Tensor xhat = sum.to(at::kFloat) * rstd, dy = d_normed.to(at::kFloat);
  at::Tensor dx, dw;
  if (wants_x) {
    const at::Tensor g = weight.defined() ? dy * weight.to(at::kFloat) : dy;
    dx = rstd * (g - xhat * (g * xhat).mean(-1, /*keepdim=*/true));
    if (d_sum.defined()) dx = dx + d_sum.to(at::kFloat);
    dx = dx.to(sum.scalar_type());
  }
  if (wants_w) dw = (dy * xhat).reshape({-1, sum.size(-1)}).sum(0).to(weight.scalar_type());
  return {dx, dw};
}

// The kernels' results carry no graph of their own: a backward that records one (create_graph)
// would get a wrong one. Nothing in segtrain asks for it.
void refuse_double_backward() {
  TORCH_CHECK(!at::GradMode::is_enabled(),
              "the fused residual add and norm (SEGTRAIN_FUSED_KERNELS=all) has no second derivative; "
              "SEGTRAIN_FUSED_KERNELS=1 takes the add and the norm apart");
}

// An absent weight or bias (undefined) as autograd's Function takes it: no input at all.
std::optional<at::Tensor> optional(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// Inputs x, branch, weight and bias (either may be absent), eps and whether the norm is LayerNorm
// (centered) or RMSNorm; outputs sum and normed.
class AddNormNode : public torch::autograd::Function<AddNormNode> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& branch,
                               const std::optional<at::Tensor>& weight_input,
                               const std::optional<at::Tensor>& bias_input, double eps, bool centered) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const at::Tensor weight = weight_input.value_or(at::Tensor()), bias = bias_input.value_or(at::Tensor());
    const Forward f = forward_pass(x, branch, weight, bias, eps, centered);
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
        if (wants_x) dx = add_norm_input_gradient_cuda(dy, for_kernel(d_sum), sum, mean, rstd, for_kernel(weight));
        if (wants_w || wants_b) std::tie(dw, db) = norm_weight_gradients_cuda(dy, sum, mean, rstd);
      } else  // NOLINT(readability-misleading-indentation): the CPU's paths follow
#endif
      if (!mean.defined()) {
        std::tie(dx, dw) = rms_norm_backward_on_host(d_normed, d_sum, sum, rstd, weight, wants_x, wants_w);
      } else {
        std::tie(dx, dw, db) = at::native_layer_norm_backward(d_normed, sum, {sum.size(-1)}, mean, rstd, weight, bias,
                                                              {wants_x, wants_w, wants_b});
        if (wants_x && d_sum.defined()) dx = dx + d_sum;
      }
    }
    // x and branch take the same gradient (the add's backward), as ATen's add returns it.
    return {ctx->needs_input_grad(0) ? dx : at::Tensor(), ctx->needs_input_grad(1) ? dx : at::Tensor(),
            wants_w ? dw : at::Tensor(), wants_b ? db : at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

thread_local bool node_everywhere = false;  // NodeEverywhereForTests

bool takes_fused(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight, const at::Tensor& bias) {
  const bool asked = node_everywhere || (SEGTRAIN_WITH_CUDA && untested_kernels_requested() && x.is_cuda());
  return asked && add_norm_fused_refusal(x, branch, weight, bias).empty();
}

ResidualNorm apply_node(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight, const at::Tensor& bias,
                        double eps, bool centered) {
  const auto out = AddNormNode::apply(x, branch, optional(weight), optional(bias), eps, centered);
  return {out[0], out[1]};
}

void require_fused(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight, const at::Tensor& bias) {
  if (const std::string why = add_norm_fused_refusal(x, branch, weight, bias); !why.empty())
    throw InputError("the fused residual add and norm does not apply: " + why);
}

}  // namespace

std::string add_norm_fused_refusal(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                                   const at::Tensor& bias) {
  if (!x.defined() || !branch.defined()) return "it takes a defined x and branch";
  if (x.dim() < 1 || x.sizes() != branch.sizes()) return "it takes x and branch of one shape [..., D]";
  const auto t = x.scalar_type();
  if (!kernel_dtype(t)) return std::string("it takes fp32, bf16 or fp16; got ") + c10::toString(t);
  for (const at::Tensor* p : {&branch, &weight, &bias})
    if (p->defined() && (p->scalar_type() != t || p->device() != x.device()))
      return std::string("it takes x, branch, weight and bias of one dtype and device; x is ") + c10::toString(t) +
             " on " + x.device().str() + ", " + (p == &branch ? "branch" : p == &weight ? "weight" : "bias") + " " +
             c10::toString(p->scalar_type()) + " on " + p->device().str();
  const int64_t d = x.size(-1);
  for (const at::Tensor* p : {&weight, &bias})
    if (p->defined() && (p->dim() != 1 || p->size(0) != d)) return "it takes weight and bias of x's last dimension";
  const int64_t bytes = d * static_cast<int64_t>(c10::elementSize(t));
  if (d == 0 || bytes % 16 != 0 || bytes > kFusedNormRowBytes)
    return "its kernels take rows of a multiple of 16 bytes up to " + std::to_string(kFusedNormRowBytes) + "; got " +
           std::to_string(d) + " values of " + std::to_string(c10::elementSize(t)) + " bytes";
  // One block a row: a CUDA grid's x dimension holds at most 2^31 - 1 (residual_norm_cuda.cu's check_row).
  if (const int64_t rows = x.numel() / d; rows > int64_t{0x7fffffff})
    return "its kernels take at most 2^31 - 1 rows; got " + std::to_string(rows);
  return "";
}

ResidualNorm add_layer_norm_fused(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                                  const at::Tensor& bias, double eps) {
  require_fused(x, branch, weight, bias);
  return apply_node(x, branch, weight, bias, eps, /*centered=*/true);
}

ResidualNorm add_rms_norm_fused(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight, double eps) {
  require_fused(x, branch, weight, at::Tensor());
  return apply_node(x, branch, weight, at::Tensor(), eps, /*centered=*/false);
}

NodeEverywhereForTests::NodeEverywhereForTests() : before_(node_everywhere) { node_everywhere = true; }
NodeEverywhereForTests::~NodeEverywhereForTests() { node_everywhere = before_; }

ResidualNorm add_layer_norm(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                            const at::Tensor& bias, double eps, NormReader reader) {
  if (!branch.defined()) return {x, layer_norm(x, weight, bias, eps, reader)};
  // Its normed output keeps x's dtype: a 16-bit one only where a matmul reads it (kernels/layer_norm.h).
  if (reader == NormReader::matmul && takes_fused(x, branch, weight, bias)) {
    record_path(ForwardPath::residual_layer_norm_kernel);
    return apply_node(x, branch, weight, bias, eps, /*centered=*/true);
  }
  at::Tensor sum = x + branch;
  return {sum, layer_norm(sum, weight, bias, eps, reader)};
}

ResidualNorm add_rms_norm(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight, double eps) {
  if (!branch.defined()) return {x, rms_norm(x, weight, eps)};
  // As kernels/rms_norm.h's fused path: x's dtype, the product rounded once.
  if (takes_fused(x, branch, weight, at::Tensor())) {
    record_path(ForwardPath::residual_rms_norm_kernel);
    return apply_node(x, branch, weight, at::Tensor(), eps, /*centered=*/false);
  }
  at::Tensor sum = x + branch;
  return {sum, rms_norm(sum, weight, eps)};
}

}  // namespace segtrain::kernels
