#include "models/modules/converters/lora.h"

#include <cmath>
#include <set>
#include <utility>

#include "common/error.h"
#include "common/log.h"
#include "models/modules/converters/lora_adapter.h"
#include "models/modules/projection.h"
#include "models/spec/converters/lora_record.h"

namespace segtrain::models {

namespace {

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
    throw_first(lora_problems(lora_, c.arch, c.activation_checkpointing));
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
