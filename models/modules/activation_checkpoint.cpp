#include "models/modules/activation_checkpoint.h"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <memory>
#include <type_traits>

namespace segtrain::models {

namespace {

using torch::autograd::variable_list;

struct AutocastState {
  bool cpu = false;
  at::ScalarType cpu_dtype = at::kBFloat16;
#if SEGTRAIN_WITH_CUDA
  bool cuda = false;
  at::ScalarType cuda_dtype = at::kHalf;
#endif
  static AutocastState current() {
    AutocastState s;
    s.cpu = at::autocast::is_autocast_enabled(at::kCPU);
    s.cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
#if SEGTRAIN_WITH_CUDA
    s.cuda = at::autocast::is_autocast_enabled(at::kCUDA);
    s.cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
#endif
    return s;
  }
  bool enabled() const {
#if SEGTRAIN_WITH_CUDA
    if (cuda) return true;
#endif
    return cpu;
  }
  void apply() const {
    at::autocast::set_autocast_enabled(at::kCPU, cpu);
    at::autocast::set_autocast_dtype(at::kCPU, cpu_dtype);
#if SEGTRAIN_WITH_CUDA
    at::autocast::set_autocast_enabled(at::kCUDA, cuda);
    at::autocast::set_autocast_dtype(at::kCUDA, cuda_dtype);
#endif
  }
};

struct CheckpointBackward : torch::autograd::Node {
  std::function<at::Tensor(const at::Tensor&)> fn;
  at::Tensor input;  // detached
  bool input_needs_grad = true;  // else only the parameters fn reads get gradients
  AutocastState autocast;  // the forward's, so the recomputation matches it

  variable_list apply(variable_list&& grads) override {
    const auto outer = AutocastState::current();
    autocast.apply();
    at::Tensor x = input.detach().requires_grad_(input_needs_grad);
    at::Tensor y;
    {
      torch::autograd::GradMode::set_enabled(true);
      y = fn(x);
    }
    outer.apply();
    // The recomputation's bf16 casts of the weights (autocast's cache) must not outlive it:
    // the optimizer updates the weights in place next, and the next forward would read them.
    if (autocast.enabled()) at::autocast::clear_cache();
    // (A block that reads none of its trainable weights for this input has nothing to backpropagate.)
    if (y.requires_grad()) torch::autograd::backward({y}, {grads[0]});
    input.reset();
    return {input_needs_grad ? x.grad() : at::Tensor()};
  }
  void release_variables() override { input.reset(); }
};

// LibTorch 2.13 holds autograd nodes in c10::intrusive_ptr, earlier releases (2.11, which GPU
// images ship) in std::shared_ptr: create_gradient_edge takes whichever Node derives for. A
// template, so that the branch of the other release is never instantiated.
template <typename NodeType>
auto make_node() {
  if constexpr (std::is_base_of_v<c10::intrusive_ptr_target, torch::autograd::Node>) {
    return c10::make_intrusive<NodeType>();
  } else {
    return std::make_shared<NodeType>();
  }
}

}  // namespace

at::Tensor checkpointed(const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& x,
                        bool reads_trainable) {
  // Nothing of fn's would have a gradient: its activations are not kept anyway.
  if (!torch::autograd::GradMode::is_enabled() || !(x.requires_grad() || reads_trainable)) return fn(x);
  at::Tensor y;
  {
    torch::autograd::AutoGradMode no_grad(false);
    y = fn(x);
  }
  auto node = make_node<CheckpointBackward>();
  node->fn = fn;
  node->input = x.detach();
  node->input_needs_grad = x.requires_grad();
  node->autocast = AutocastState::current();
  node->set_next_edges(torch::autograd::collect_next_edges(x));
  torch::autograd::create_gradient_edge(y, node);
  return y;
}

}  // namespace segtrain::models
