#include "models/converters/lora.h"

#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/normalization.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "common/error.h"
#include "common/log.h"
#include "models/llama_block.h"
#include "models/projection.h"

namespace segtrain::models {

namespace {

constexpr const char* kLoraA = ".lora_A.weight";
constexpr const char* kLoraB = ".lora_B.weight";

bool listed(const std::vector<std::string>& words, const std::string& word) {
  return std::find(words.begin(), words.end(), word) != words.end();
}

void train(torch::nn::Module& module) {
  for (auto& p : module.parameters()) p.set_requires_grad(true);
}

class Lora final : public ModelConverter {
 public:
  Lora(LoraConfig lora, std::vector<std::string> trainable) : lora_(std::move(lora)), trainable_(std::move(trainable)) {
    if (lora_.rank <= 0) throw InputError("model.adapters.lora.rank: a LoRA converter needs a rank > 0");
  }

  std::string name() const override { return "lora"; }
  std::string config_key() const override { return "model.adapters.lora"; }

  void convert(TransformerLM& model) const override {
    const auto& c = model->config();
    throw_first(lora_problems(lora_, trainable_, c.arch, c.activation_checkpointing));
    throw_first(lora_size_problems(lora_, c));  // before any adapter is allocated
    say_share(model);
    for (auto& p : model->parameters()) p.set_requires_grad(false);
    const BlockKind block = arch_layout(c.arch).block;
    std::set<std::string> modules;
    for (const auto& target : lora_.targets) modules.insert(*lora_module(block, target));
    for (const auto& module : *model->blocks)
      for (const auto& child : module->named_children())
        if (modules.count(child.key()))
          if (auto* projection = child.value()->as<ProjectionImpl>())
            projection->add_lora(lora_.rank, lora_.alpha, lora_.dropout);
    if (listed(trainable_, "norms"))
      for (const auto& module : model->modules())
        if (module->as<torch::nn::LayerNormImpl>() || module->as<RMSNormImpl>()) train(*module);
    if (listed(trainable_, "embeddings")) {
      train(*model->wte);
      if (model->wpe) train(*model->wpe);
    }
    if (listed(trainable_, "head")) {
      if (model->lm_head) train(*model->lm_head);
      else train(*model->wte);  // a tied head is the token table
    }
  }

  nlohmann::json to_json() const override {
    return {{"name", name()},          {"rank", lora_.rank},       {"alpha", lora_.alpha},
            {"dropout", lora_.dropout}, {"targets", lora_.targets}, {"trainable", trainable_}};
  }

  // W + (alpha / rank) B A for each adapter (computed in fp32, stored as W is), the
  // adapter's tensors dropped.
  std::map<std::string, at::Tensor> fold(std::map<std::string, at::Tensor> weights) const override {
    std::vector<std::string> prefixes;
    for (const auto& [name, value] : weights)
      if (name.ends_with(kLoraA)) prefixes.push_back(name.substr(0, name.size() - std::string(kLoraA).size()));
    const double scale = lora_.alpha / static_cast<double>(lora_.rank);
    for (const auto& prefix : prefixes) {
      const auto a = weights.find(prefix + kLoraA), b = weights.find(prefix + kLoraB), w = weights.find(prefix + ".weight");
      if (b == weights.end() || w == weights.end())
        throw InputError("LoRA adapter " + prefix + " lacks its lora_B or its base weight");
      const auto delta = at::matmul(b->second.to(at::kFloat), a->second.to(at::kFloat)) * scale;
      w->second = (w->second.to(at::kFloat) + delta).to(w->second.scalar_type());
      weights.erase(a);
      weights.erase(b);
    }
    return weights;
  }

 private:
  LoraConfig lora_;
  std::vector<std::string> trainable_;

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

std::unique_ptr<ModelConverter> make_lora(LoraConfig lora, std::vector<std::string> trainable) {
  return std::make_unique<Lora>(std::move(lora), std::move(trainable));
}

}  // namespace segtrain::models
