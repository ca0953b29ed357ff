#include "trainer/train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "trainer/train/flat_buckets.h"

namespace segtrain::trainer {

FusedAdamW::FusedAdamW(const std::vector<std::pair<std::string, at::Tensor>>& named_parameters,
                       AdamWOptions options, FlatBuckets* views)
    : options_(std::move(options)), views_(views) {
  groups_.resize(2);
  groups_[0].weight_decay = options_.weight_decay;
  groups_[1].weight_decay = 0.0;
  for (const auto& [name, param] : named_parameters) {
    if (!param.requires_grad()) continue;
    Group& g = decays(options_, name, param) ? groups_[0] : groups_[1];
    g.names.push_back(name);
    g.params.push_back(param);
    g.exp_avg.push_back(at::zeros_like(param, at::MemoryFormat::Preserve));
    g.exp_avg_sq.push_back(at::zeros_like(param, at::MemoryFormat::Preserve));
    // The fused kernel reads the step count from a float tensor on the param's device.
    g.steps.push_back(at::zeros({}, param.options().dtype(at::kFloat)));
    device_ = param.device();
  }
  scalars_ = FusedStepScalars(device_);
}

FusedStepScalars::FusedStepScalars(const c10::Device& device)
    : lr(at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device))), grad_scale(at::ones_like(lr)) {}

void FusedStepScalars::set(double lr_value, double grad_factor) {
  TORCH_CHECK(grad_factor > 0, "FusedStepScalars: the gradient factor must be positive");
  lr.fill_(lr_value);
  // A factor below fp32's range (a norm near fp32's largest) stays a finite divisor.
  grad_scale.fill_(std::min(1.0 / grad_factor, static_cast<double>(std::numeric_limits<float>::max())));
}

bool decays(const AdamWOptions& options, const std::string& name, const at::Tensor& param) {
  if (param.dim() < 2) return false;
  for (const auto& pattern : options.no_decay)
    if (!pattern.empty() && name.find(pattern) != std::string::npos) return false;
  return true;
}

double clip_factor(double norm, double max_norm) {
  return max_norm > 0 && std::isfinite(norm) && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

std::vector<at::Tensor> FusedAdamW::grads() const {
  std::vector<at::Tensor> grads;
  for (const auto& g : groups_)
    for (const auto& p : g.params)
      if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

// Two foreach kernels instead of a loop over tensors.
at::Tensor grad_square_sum_of(const std::vector<at::Tensor>& grads, const c10::Device& device) {
  if (grads.empty()) return at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device));
  return at::stack(at::_foreach_norm(grads, 2, at::kFloat)).to(at::kDouble).square().sum();
}

at::Tensor FusedAdamW::grad_square_sum() { return grad_square_sum_of(grads(), device_); }

void FusedAdamW::step_group(Group& g) {
  std::vector<at::Tensor> params, grads, m, v, steps;
  for (size_t i = 0; i < g.params.size(); ++i) {
    const at::Tensor& grad = g.params[i].grad();
    if (!grad.defined()) continue;
    params.push_back(g.params[i]);
    grads.push_back(grad);
    m.push_back(g.exp_avg[i]);
    v.push_back(g.exp_avg_sq[i]);
    steps.push_back(g.steps[i]);
  }
  if (params.empty()) return;
  at::_foreach_add_(steps, 1.0);  // the kernel expects the already-incremented step
  at::NoGradGuard no_grad;
  at::_fused_adamw_(params, grads, m, v, /*max_exp_avg_sqs=*/{}, steps, scalars_.lr, options_.beta1, options_.beta2,
                    g.weight_decay, options_.eps, /*amsgrad=*/false, /*maximize=*/false, scalars_.grad_scale,
                    /*found_inf=*/std::nullopt);
}

void FusedAdamW::update() {
  for (auto& g : groups_) step_group(g);
}

void FusedAdamW::zero_grad() {
  if (views_) return views_->zero_grad();
  if (keep_gradients_) {
    std::vector<at::Tensor> kept = grads();
    if (!kept.empty()) at::_foreach_zero_(kept);
    return;
  }
  for (auto& g : groups_)
    for (auto& p : g.params)
      if (p.grad().defined()) p.mutable_grad() = at::Tensor();
}

std::vector<std::string> FusedAdamW::without_gradient() const {
  std::vector<std::string> without;
  if (views_) return without;  // the buckets' views are every parameter's gradient
  for (const auto& g : groups_)
    for (size_t i = 0; i < g.params.size(); ++i)
      if (!g.params[i].grad().defined()) without.push_back(g.names[i]);
  return without;
}

void FusedAdamW::keep_gradients() {
  if (views_) return;  // the buckets' views stay
  keep_gradients_ = true;
  for (auto& g : groups_)
    for (auto& p : g.params)
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
}

int64_t FusedAdamW::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& g : groups_)
    for (size_t i = 0; i < g.names.size(); ++i)
      bytes += static_cast<int64_t>(g.exp_avg[i].nbytes() + g.exp_avg_sq[i].nbytes() + g.steps[i].nbytes());
  return bytes;
}

std::vector<StatePiece> FusedAdamW::state_pieces() {
  std::vector<StatePiece> pieces;
  for (const auto& g : groups_)
    for (size_t i = 0; i < g.names.size(); ++i)
      pieces.push_back({g.names[i], 0, g.exp_avg[i].reshape(-1), g.exp_avg_sq[i].reshape(-1)});
  return pieces;
}

const at::Tensor& state_entry(const std::map<std::string, at::Tensor>& state, const std::string& key,
                              at::IntArrayRef like) {
  auto it = state.find(key);
  if (it == state.end()) throw InputError("optimizer state has no entry '" + key + "'");
  if (it->second.sizes() != like) throw InputError("optimizer state '" + key + "' has the wrong shape for this model");
  return it->second;
}

void FusedAdamW::load_state(const SavedOptimizerState& saved) {
  at::NoGradGuard no_grad;
  for (auto& g : groups_)
    for (size_t i = 0; i < g.names.size(); ++i) {
      const int64_t numel = g.params[i].numel();
      g.exp_avg[i].copy_(saved.read("exp_avg", g.names[i], numel, 0, numel).view(g.params[i].sizes()));
      g.exp_avg_sq[i].copy_(saved.read("exp_avg_sq", g.names[i], numel, 0, numel).view(g.params[i].sizes()));
      g.steps[i].fill_(static_cast<double>(saved.steps()));
    }
  steps_taken_ = saved.steps();
}

}  // namespace segtrain::trainer
