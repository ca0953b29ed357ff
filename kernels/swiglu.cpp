#include "kernels/swiglu.h"

#include <torch/autograd.h>

#include <string>

#include "common/error.h"
#include "kernels/forward_paths.h"
#include "kernels/fused_kernels.h"
#if SEGTRAIN_WITH_CUDA
#include "kernels/swiglu_cuda.h"
#endif

namespace segtrain::kernels {

namespace {

// Why the kernels do not take these tensors ("" when they do).
std::string fused_refusal(const at::Tensor& gate, const at::Tensor& up) {
  if (!SEGTRAIN_WITH_CUDA) return "this build of segtrain has no CUDA";
  if (!gate.is_cuda() || !up.is_cuda()) return "they take CUDA tensors; got gate on " + gate.device().str();
  const auto t = gate.scalar_type();
  if (t != at::kFloat && t != at::kBFloat16 && t != at::kHalf)
    return std::string("they take fp32, bf16 or fp16; got ") + c10::toString(t);
  if (up.scalar_type() != t || up.sizes() != gate.sizes())
    return "they take gate and up of one dtype and shape";
  return "";
}

#if SEGTRAIN_WITH_CUDA
// A tensor the kernels read as it is: contiguous and 16-byte aligned (else a copy that is).
at::Tensor readable(const at::Tensor& t) {
  if (t.is_contiguous() && reinterpret_cast<std::uintptr_t>(t.const_data_ptr()) % 16 == 0) return t;
  return t.clone(at::MemoryFormat::Contiguous);
}

class FusedSwiglu : public torch::autograd::Function<FusedSwiglu> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    const at::Tensor g = readable(gate), u = readable(up);
    ctx->save_for_backward({g, u});
    return swiglu_cuda(g, u);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [grad_gate, grad_up] = swiglu_backward_cuda(saved[0], saved[1], readable(grads[0].to(saved[0].scalar_type())));
    return {grad_gate, grad_up};
  }
};
#endif

}  // namespace

at::Tensor swiglu_composite(const at::Tensor& gate, const at::Tensor& up) { return at::silu(gate) * up; }

at::Tensor swiglu_fused(const at::Tensor& gate, const at::Tensor& up) {
  if (const std::string why = fused_refusal(gate, up); !why.empty())
    throw InputError("the fused SwiGLU kernels do not apply: " + why);
#if SEGTRAIN_WITH_CUDA
  return FusedSwiglu::apply(gate, up);
#else
  return {};
#endif
}

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up) {
  if (fused_kernels_requested() && fused_refusal(gate, up).empty()) {
    record_path(ForwardPath::swiglu_fused);
    return swiglu_fused(gate, up);
  }
  record_path(ForwardPath::swiglu_composite);
  return swiglu_composite(gate, up);
}

}  // namespace segtrain::kernels
