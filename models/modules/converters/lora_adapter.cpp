#include "models/modules/converters/lora_adapter.h"

#include <torch/nn/functional/dropout.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/linear.h>

#include <cmath>
#include <utility>
#include <vector>

#include "common/error.h"

namespace segtrain::models {

namespace {

torch::nn::Linear no_bias_linear(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

// Each row's norm ([out]) of `weight` + `scale` * `lora_weight`, as PEFT's get_weight_norm.
at::Tensor row_norms(const at::Tensor& weight, const at::Tensor& lora_weight, double scale) {
  const auto adapted = weight + scale * lora_weight;
  return at::linalg_vector_norm(adapted, 2, at::IntArrayRef{1}).to(adapted.scalar_type());
}

}  // namespace

LoraAdapter::LoraAdapter(const LoraConfig& lora, at::Tensor a, at::Tensor b, at::Tensor magnitude)
    : a_(std::move(a)),
      b_(std::move(b)),
      magnitude_(std::move(magnitude)),
      scale_(lora.alpha / static_cast<double>(lora.rank)),
      dropout_(lora.dropout) {}

at::Tensor LoraAdapter::delta(const at::Tensor& x, const at::Tensor& y, const ProjectionImpl& projection) const {
  if (magnitude_.defined()) return dora_delta(x, y, projection);
  namespace F = torch::nn::functional;
  const auto in =
      dropout_ > 0 ? F::dropout(x, F::DropoutFuncOptions().p(dropout_).training(projection.is_training())) : x;
  return at::linear(at::linear(in, a_), b_) * scale_;
}

// PEFT 0.21's DoraLinearVariant.forward and DoraLinearLayer.forward, step for step: without
// dropout (or in eval) the base's output is reused, less its bias; with it, the dropped input
// goes through W again, as it does through the adapter.
at::Tensor LoraAdapter::dora_delta(const at::Tensor& x, const at::Tensor& y, const ProjectionImpl& projection) const {
  namespace F = torch::nn::functional;
  const bool dropped = dropout_ > 0 && projection.is_training();
  const auto in = dropped ? F::dropout(x, F::DropoutFuncOptions().p(dropout_).training(true)) : x;
  const auto weight = projection.weight.to(x.scalar_type());
  const auto lora_weight = at::matmul(b_, a_).to(x.scalar_type());
  const auto weight_norm = row_norms(weight, lora_weight.detach(), scale_).detach();
  const auto mag_norm_scale = (magnitude_ / weight_norm).view({1, -1});
  const auto lora_result = at::linear(at::linear(in, a_), b_);
  at::Tensor base_result;
  if (dropped) base_result = at::linear(in, weight);
  else base_result = projection.bias.defined() ? y - projection.bias : y;
  return (mag_norm_scale - 1) * base_result + mag_norm_scale * lora_result * scale_;
}

at::Tensor LoraAdapter::fold(const at::Tensor& weight) const {
  const auto delta = at::matmul(b_.to(at::kFloat), a_.to(at::kFloat)) * scale_;
  const auto adapted = weight.to(at::kFloat) + delta;
  if (!magnitude_.defined()) return adapted.to(weight.scalar_type());
  // PEFT's merge: the norm of the unmerged weight plus its delta (scaling 1: the delta holds it).
  const auto factor = magnitude_.to(at::kFloat) / row_norms(weight.to(at::kFloat), delta, 1.0);
  return (factor.view({-1, 1}) * adapted).to(weight.scalar_type());
}

void add_lora_adapter(ProjectionImpl& projection, const LoraConfig& lora) {
  // Both built as torch::nn::Linear draws them, then drawn again as PEFT does: the run's random
  // stream takes the same draws whichever adapter the projection holds.
  auto lora_A = projection.register_module("lora_A", no_bias_linear(projection.in_features, lora.rank));
  auto lora_B = projection.register_module("lora_B", no_bias_linear(lora.rank, projection.out_features));
  torch::NoGradGuard no_grad;
  torch::nn::init::kaiming_uniform_(lora_A->weight, std::sqrt(5.0));
  lora_B->weight.zero_();
  lora_A->to(projection.weight.device());
  lora_B->to(projection.weight.device());
  at::Tensor magnitude;
  if (lora.use_dora) {
    // PEFT's update_layer: the row norms of W + (alpha / rank) B A, which B = 0 makes W's.
    const double scale = lora.alpha / static_cast<double>(lora.rank);
    const auto norms = row_norms(projection.weight.to(at::kFloat), at::matmul(lora_B->weight, lora_A->weight), scale);
    auto holder = projection.register_module("lora_magnitude_vector", std::make_shared<torch::nn::Module>());
    magnitude = holder->register_parameter("weight", norms.clone());
  }
  projection.set_adapter(std::make_shared<LoraAdapter>(lora, lora_A->weight, lora_B->weight, magnitude));
}

std::map<std::string, at::Tensor> fold_lora_adapters(const LoraConfig& lora, std::map<std::string, at::Tensor> weights) {
  const std::string a_suffix = kLoraTensors[0].ours, b_suffix = kLoraTensors[1].ours, m_suffix = kLoraTensors[2].ours;
  std::vector<std::string> prefixes;
  for (const auto& [name, value] : weights)
    if (name.ends_with(a_suffix)) prefixes.push_back(name.substr(0, name.size() - a_suffix.size()));
  for (const auto& prefix : prefixes) {
    const auto a = weights.find(prefix + a_suffix), b = weights.find(prefix + b_suffix), w = weights.find(prefix + ".weight");
    const auto m = weights.find(prefix + m_suffix);
    if (b == weights.end() || w == weights.end() || (lora.use_dora && m == weights.end()))
      throw InputError("LoRA adapter " + prefix + " lacks its lora_B, its base weight" +
                       (lora.use_dora ? " or its DoRA magnitude" : ""));
    w->second = LoraAdapter(lora, a->second, b->second, lora.use_dora ? m->second : at::Tensor()).fold(w->second);
    weights.erase(a);
    weights.erase(b);
    if (lora.use_dora) weights.erase(m);
  }
  return weights;
}

}  // namespace segtrain::models
