#include "models/modules/converters/lora.h"

#include <ATen/autocast_mode.h>
#include <torch/nn/functional/dropout.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/linear.h>

#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "models/modules/projection.h"
#include "models/spec/converters/lora_config.h"

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

// The adapter a Projection takes (ProjectionAdapter, projection.h): the projection's output
// with what it adds, and the weight it folds into.
class LoraAdapter final : public ProjectionAdapter {
 public:
  // `a`, `b` and, with use_dora, `magnitude`: the adapter's tensors (the parameters it trains, or
  // a file's).
  LoraAdapter(const LoraConfig& lora, at::Tensor a, at::Tensor b, at::Tensor magnitude = {});
  at::Tensor adapted(const at::Tensor& x, const at::Tensor& y, const ProjectionImpl& projection) const override;
  // W + (alpha / rank) B A, computed in fp32; with DoRA, its rows scaled to the magnitude.
  at::Tensor fold(const at::Tensor& weight) const override;

 private:
  at::Tensor a_, b_;
  at::Tensor magnitude_;  // undefined without DoRA
  double scale_;          // alpha / rank
  double dropout_;        // on the adapter's input, while training

  at::Tensor dora_delta(const at::Tensor& x, const at::Tensor& y, const ProjectionImpl& projection) const;
};

LoraAdapter::LoraAdapter(const LoraConfig& lora, at::Tensor a, at::Tensor b, at::Tensor magnitude)
    : a_(std::move(a)),
      b_(std::move(b)),
      magnitude_(std::move(magnitude)),
      scale_(lora.alpha / static_cast<double>(lora.rank)),
      dropout_(lora.dropout) {}

at::Tensor LoraAdapter::adapted(const at::Tensor& x, const at::Tensor& y, const ProjectionImpl& projection) const {
  if (magnitude_.defined()) return y + dora_delta(x, y, projection);
  namespace F = torch::nn::functional;
  const auto in =
      dropout_ > 0 ? F::dropout(x, F::DropoutFuncOptions().p(dropout_).training(projection.is_training())) : x;
  const at::Tensor down = at::linear(in, a_);  // [..., rank]
  // PEFT's y + B(A(x)) * scale, with the scale and the sum in B's GEMM (addmm's alpha and beta):
  // written as three ops it passes over the [tokens, out] output four more times forward and
  // twice more backward (the product's scaling). Where the dtypes would need promoting (no
  // autocast to cast them), the three ops.
  const bool one_dtype = at::autocast::is_autocast_enabled(y.device().type()) ||
                         (y.scalar_type() == down.scalar_type() && down.scalar_type() == b_.scalar_type());
  if (!one_dtype || !y.is_contiguous()) return y + at::linear(down, b_) * scale_;
  const int64_t out = y.size(-1);
  return at::addmm(y.view({-1, out}), down.reshape({-1, down.size(-1)}), b_.t(), /*beta=*/1, /*alpha=*/scale_)
      .view(y.sizes());
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

// Adds the adapter to `projection`: A and B as PEFT draws them, both fp32 on the weight's device;
// with use_dora, the magnitude the row norms of W.
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

// `weights` (a converted model's, by parameter name) with each adapter folded into the weight it
// adapts and its tensors dropped; InputError when an adapter's tensors or its weight are missing.
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

class Lora final : public ModelConverter {
 public:
  explicit Lora(LoraConfig lora) : lora_(std::move(lora)) {
    if (lora_.rank <= 0) throw InputError("model.adapters.lora.rank: a LoRA converter needs a rank > 0");
  }

  std::string name() const override { return "lora"; }
  std::string config_key() const override { return "model.adapters.lora"; }
  const LoraConfig& settings() const { return lora_; }

  void convert(TransformerLM& model) const override {
    const auto& c = model->config();
    throw_first(lora_problems(lora_, c.arch, c.activation_checkpointing.any()));
    throw_first(lora_size_problems(lora_, c));  // before any adapter is allocated
    say_share(model);
    for (auto& p : model->parameters()) p.set_requires_grad(false);
    const BlockKind block = arch_layout(c.arch).block;
    std::set<std::string> modules;
    for (const auto& target : lora_.targets) modules.insert(*lora_module(block, target));
    for (const auto& module : *model->blocks)
      for (const auto& child : module->named_children())
        if (modules.count(child.key()))
          if (auto* projection = child.value()->as<ProjectionImpl>()) add_lora_adapter(*projection, lora_);
    const bool tied_head = !model->lm_head;
    for (auto& item : model->named_parameters())
      if (trains_with_adapters(lora_.trainable, item.key(), tied_head)) item.value().set_requires_grad(true);
  }

  nlohmann::json to_json() const override { return lora_record(lora_); }

  std::map<std::string, at::Tensor> fold(std::map<std::string, at::Tensor> weights) const override {
    return fold_lora_adapters(lora_, std::move(weights));
  }

 private:
  LoraConfig lora_;

  // A rank whose adapters are a large share of the model (a tenth or more) is said: such a run
  // trains nearly what full fine-tuning does, at LoRA's cost in memory and steps.
  void say_share(const TransformerLM& model) const {
    const double adapters = lora_parameters(lora_, model->config());
    double base = 0;
    for (const auto& p : model->parameters()) base += static_cast<double>(p.numel());
    if (adapters < 0.1 * base) return;
    log::warn("model.adapters.lora.rank ", lora_.rank, ": the adapters add ", human_count(adapters), " parameters, ",
              static_cast<int64_t>(std::lround(100 * adapters / base)), "% of the model's ", human_count(base),
              " (", human_bytes(4 * adapters), " in fp32 before gradients and AdamW's state); a lower rank keeps "
              "LoRA's savings");
  }
};

}  // namespace

std::unique_ptr<ModelConverter> make_lora(LoraConfig lora) { return std::make_unique<Lora>(std::move(lora)); }

ConverterKind lora_converter() {
  return {"lora", "model.adapters.lora",
          [](const ConverterSettings& settings) -> std::unique_ptr<ModelConverter> {
            if (settings.lora.rank <= 0) return nullptr;
            return make_lora(settings.lora);
          },
          [](const nlohmann::json& entry, const std::string& source) -> std::unique_ptr<ModelConverter> {
            const LoraConfig lora = lora_from_record(entry, source);
            try {
              return make_lora(lora);
            } catch (const InputError& e) {
              throw InputError(source + ": " + e.what());
            }
          }};
}

const LoraConfig* lora_settings(const Converters& converters) {
  for (const auto& converter : converters)
    if (const auto* lora = dynamic_cast<const Lora*>(converter.get())) return &lora->settings();
  return nullptr;
}

}  // namespace segtrain::models
