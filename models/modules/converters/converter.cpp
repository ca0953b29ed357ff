#include "models/modules/converters/converter.h"

namespace segtrain::models {

using nlohmann::json;

void apply_converters(const Converters& converters, TransformerLM& model) {
  for (const auto& converter : converters) converter->convert(model);
}

std::vector<std::pair<std::string, at::Tensor>> trainable_parameters(const TransformerLM& model) {
  std::vector<std::pair<std::string, at::Tensor>> trainable;
  for (const auto& item : model->named_parameters())
    if (item.value().requires_grad()) trainable.emplace_back(item.key(), item.value());
  return trainable;
}

std::map<std::string, at::Tensor> fold_converters(const Converters& converters,
                                                  std::map<std::string, at::Tensor> weights) {
  for (auto it = converters.rbegin(); it != converters.rend(); ++it) weights = (*it)->fold(std::move(weights));
  return weights;
}

std::string converters_to_json(const Converters& converters) {
  json list = json::array();
  for (const auto& converter : converters) list.push_back(converter->to_json());
  return json{{"converters", list}}.dump(2) + "\n";
}

}  // namespace segtrain::models
