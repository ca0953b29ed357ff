#include "kernels/linear.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>

#include "common/error.h"
#include "kernels/forward_paths.h"
#include "kernels/fused_kernels.h"
#if SEGTRAIN_WITH_CUDA
#include "kernels/bias_gradient_cuda.h"
#endif

namespace segtrain::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

const char* approximation(bool tanh) { return tanh ? "tanh" : "none"; }

// x as [tokens, in] (a view where x's layout allows) and the output's sizes.
struct Flat {
  at::Tensor x;
  std::vector<int64_t> out_sizes;
};
Flat flatten(const at::Tensor& x, const at::Tensor& weight) {
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
  return {x.reshape({-1, x.size(-1)}), std::move(sizes)};
}

// x W^T + b as ATen's linear computes it on a flattened x: one GEMM with the bias in its epilogue.
// Outside autocast: the dtypes already are the ones it would cast to (linear_fused_refusal).
at::Tensor affine(const at::Tensor& x2, const at::Tensor& weight, const at::Tensor& bias) {
  return at::addmm(bias, x2, weight.t());
}

// The input's and the weight's gradients of x W^T + b from the [tokens, out] gradient g of its
// output, ATen's GEMMs (its addmm backward's), each only where autograd asks for it.
variable_list input_and_weight_gradients(AutogradContext* ctx, const at::Tensor& g, const at::Tensor& x2,
                                         const at::Tensor& weight) {
  at::Tensor grad_x, grad_w;
  if (ctx->needs_input_grad(0)) {
    std::vector<int64_t> sizes;
    for (const auto& s : ctx->saved_data["x_sizes"].toIntList()) sizes.push_back(s);
    grad_x = at::mm(g, weight).view(sizes);
  }
  if (ctx->needs_input_grad(1)) grad_w = at::mm(g.t(), x2);
  return {grad_x, grad_w};
}

// The kernels' results carry no graph of their own: a backward that records one (create_graph, for
// second derivatives) would get a wrong one. Nothing in segtrain asks for it.
void refuse_double_backward() {
  TORCH_CHECK(!at::GradMode::is_enabled(),
              "the fused linear's backward (SEGTRAIN_FUSED_KERNELS=all) has no second derivative; "
              "SEGTRAIN_FUSED_KERNELS=1 takes ATen's linear");
}

class LinearNode : public torch::autograd::Function<LinearNode> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const Flat flat = flatten(x, weight);
    ctx->save_for_backward({flat.x, weight});
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    // Not a view of a tensor made here: autograd would refuse in-place ops on it, which ATen's linear allows.
    return at::_unsafe_view(affine(flat.x, weight, bias), flat.out_sizes);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    refuse_double_backward();
    const auto saved = ctx->get_saved_variables();
    const at::Tensor g = grads[0].reshape({-1, saved[1].size(0)}).contiguous();
    variable_list out = input_and_weight_gradients(ctx, g, saved[0], saved[1]);
    out.push_back(ctx->needs_input_grad(2) ? bias_gradient(g) : at::Tensor());
    return out;
  }
};

class LinearGeluNode : public torch::autograd::Function<LinearGeluNode> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                            bool tanh) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const Flat flat = flatten(x, weight);
    const at::Tensor pre = affine(flat.x, weight, bias);
    // What ATen's linear and gelu keep for backward: x, W and GELU's input.
    ctx->save_for_backward({flat.x, weight, pre});
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    ctx->saved_data["tanh"] = tanh;
    return at::_unsafe_view(at::gelu(pre, approximation(tanh)), flat.out_sizes);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    refuse_double_backward();
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& pre = saved[2];
    const at::Tensor dy = grads[0].reshape(pre.sizes()).contiguous();
    auto [grad_pre, grad_b] = gelu_bias_gradient(pre, dy, ctx->saved_data["tanh"].toBool());
    variable_list out = input_and_weight_gradients(ctx, grad_pre, saved[0], saved[1]);
    out.push_back(ctx->needs_input_grad(2) ? grad_b : at::Tensor());
    out.push_back(at::Tensor());  // tanh
    return out;
  }
};

void require_fused(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (const std::string why = linear_fused_refusal(x, weight, bias); !why.empty())
    throw InputError("the fused linear's bias-gradient node does not apply: " + why);
}

// Where linear() and linear_gelu() take the nodes: a CUDA tensor of a CUDA build, with the
// kernels no GPU has run yet asked for, in a forward that records gradients (evaluation under
// no-grad has no bias gradient to fuse: ATen's linear).
bool takes_fused(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return SEGTRAIN_WITH_CUDA && untested_kernels_requested() && x.is_cuda() && at::GradMode::is_enabled() &&
         linear_fused_refusal(x, weight, bias).empty();
}

}  // namespace

std::string linear_fused_refusal(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!bias.defined()) return "it fuses a bias's gradient; this projection has no bias";
  if (!bias.requires_grad()) return "it fuses a bias's gradient; this bias is not trained";
  const auto t = x.scalar_type();
  if (!kernel_dtype(t)) return std::string("it takes fp32, bf16 or fp16; got ") + c10::toString(t);
  if (weight.scalar_type() != t || bias.scalar_type() != t)
    return std::string("it takes x, weight and bias of one dtype; got ") + c10::toString(t) + ", " +
           c10::toString(weight.scalar_type()) + " and " + c10::toString(bias.scalar_type());
  if (weight.dim() != 2 || x.dim() < 1 || x.size(-1) != weight.size(1) || bias.dim() != 1 ||
      bias.size(0) != weight.size(0))
    return "it takes x [..., in], weight [out, in] and bias [out]";
  if (weight.numel() == 0) return "it takes a weight of at least one element";
  const auto device = x.device().type();
  if (at::autocast::is_autocast_enabled(device) && at::autocast::get_autocast_dtype(device) != t)
    return std::string("autocast would cast x, weight and bias to ") +
           c10::toString(at::autocast::get_autocast_dtype(device));
  return "";
}

at::Tensor bias_gradient(const at::Tensor& grad) {
#if SEGTRAIN_WITH_CUDA
  if (grad.is_cuda()) return column_sums_cuda(grad.contiguous());
#endif
  return grad.sum(0, /*keepdim=*/false, at::kFloat).to(grad.scalar_type());
}

std::pair<at::Tensor, at::Tensor> gelu_bias_gradient(const at::Tensor& pre, const at::Tensor& dy, bool tanh) {
#if SEGTRAIN_WITH_CUDA
  if (pre.is_cuda()) return gelu_backward_column_sums_cuda(pre.contiguous(), dy.contiguous(), tanh);
#endif
  at::Tensor grad_pre = at::gelu_backward(dy, pre, approximation(tanh));
  return {grad_pre, bias_gradient(grad_pre)};
}

at::Tensor linear_fused(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  require_fused(x, weight, bias);
  return LinearNode::apply(x, weight, bias);
}

at::Tensor linear_gelu_fused(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, bool tanh) {
  require_fused(x, weight, bias);
  return LinearGeluNode::apply(x, weight, bias, tanh);
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (takes_fused(x, weight, bias)) {
    record_path(ForwardPath::linear_bias_gradient_kernel);
    return LinearNode::apply(x, weight, bias);
  }
  return at::linear(x, weight, bias);
}

at::Tensor linear_gelu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, bool tanh) {
  if (takes_fused(x, weight, bias)) {
    record_path(ForwardPath::gelu_bias_gradient_kernel);
    return LinearGeluNode::apply(x, weight, bias, tanh);
  }
  return at::gelu(at::linear(x, weight, bias), approximation(tanh));
}

}  // namespace segtrain::kernels
