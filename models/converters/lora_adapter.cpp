#include "models/converters/lora_adapter.h"

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

}  // namespace

LoraAdapter::LoraAdapter(const LoraConfig& lora, at::Tensor a, at::Tensor b)
    : a_(std::move(a)), b_(std::move(b)), scale_(lora.alpha / static_cast<double>(lora.rank)), dropout_(lora.dropout) {}

at::Tensor LoraAdapter::delta(const at::Tensor& x, const at::Tensor& /*y*/, const ProjectionImpl& projection) const {
  namespace F = torch::nn::functional;
  const auto in =
      dropout_ > 0 ? F::dropout(x, F::DropoutFuncOptions().p(dropout_).training(projection.is_training())) : x;
  return at::linear(at::linear(in, a_), b_) * scale_;
}

at::Tensor LoraAdapter::fold(const at::Tensor& weight) const {
  const auto delta = at::matmul(b_.to(at::kFloat), a_.to(at::kFloat)) * scale_;
  return (weight.to(at::kFloat) + delta).to(weight.scalar_type());
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
  projection.set_adapter(std::make_shared<LoraAdapter>(lora, lora_A->weight, lora_B->weight));
}

std::map<std::string, at::Tensor> fold_lora_adapters(const LoraConfig& lora, std::map<std::string, at::Tensor> weights) {
  const std::string a_suffix = kLoraTensors[0].ours, b_suffix = kLoraTensors[1].ours;
  std::vector<std::string> prefixes;
  for (const auto& [name, value] : weights)
    if (name.ends_with(a_suffix)) prefixes.push_back(name.substr(0, name.size() - a_suffix.size()));
  for (const auto& prefix : prefixes) {
    const auto a = weights.find(prefix + a_suffix), b = weights.find(prefix + b_suffix), w = weights.find(prefix + ".weight");
    if (b == weights.end() || w == weights.end())
      throw InputError("LoRA adapter " + prefix + " lacks its lora_B or its base weight");
    w->second = LoraAdapter(lora, a->second, b->second).fold(w->second);
    weights.erase(a);
    weights.erase(b);
  }
  return weights;
}

}  // namespace segtrain::models
