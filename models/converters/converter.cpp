#include "models/converters/converter.h"

#include <algorithm>
#include <filesystem>

#include "common/error.h"
#include "common/file_io.h"
#include "models/converters/freeze.h"
#include "models/converters/lora.h"

namespace segtrain::models {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool string_list(const json& entry, const char* key) {
  return entry.contains(key) && entry[key].is_array() &&
         std::all_of(entry[key].begin(), entry[key].end(), [](const json& v) { return v.is_string(); });
}

std::unique_ptr<ModelConverter> lora_from_json(const json& entry, const std::string& source) {
  const bool fits = entry.contains("rank") && entry["rank"].is_number_integer() && entry.contains("alpha") &&
                    entry["alpha"].is_number() && entry.contains("dropout") && entry["dropout"].is_number() &&
                    string_list(entry, "targets") && string_list(entry, "trainable");
  if (!fits)
    throw InputError(source + ": the lora converter needs \"rank\" (an integer), \"alpha\", \"dropout\" (numbers), "
                     "\"targets\" and \"trainable\" (lists of strings)");
  LoraConfig lora;
  lora.rank = entry["rank"].get<int64_t>();
  lora.alpha = entry["alpha"].get<double>();
  lora.dropout = entry["dropout"].get<double>();
  lora.targets = entry["targets"].get<std::vector<std::string>>();
  try {
    return make_lora(lora, entry["trainable"].get<std::vector<std::string>>());
  } catch (const InputError& e) {
    throw InputError(source + ": " + e.what());
  }
}

}  // namespace

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

// The registry: each converter's name and how it is rebuilt from its to_json().
Converters converters_from_json(const std::string& text, const std::string& source) {
  const std::string expected = source + ": expected {\"converters\": [{\"name\": \"freeze\", ...}, ...]}";
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(expected + ", not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("converters") || !j["converters"].is_array()) throw InputError(expected);
  Converters converters;
  for (const json& entry : j["converters"]) {
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string()) throw InputError(expected);
    const auto name = entry["name"].get<std::string>();
    if (name == "freeze") {
      if (!string_list(entry, "patterns"))
        throw InputError(source + ": the freeze converter needs \"patterns\": a list of strings");
      converters.push_back(make_freeze(entry["patterns"].get<std::vector<std::string>>()));
    } else if (name == "lora") {
      converters.push_back(lora_from_json(entry, source));
    } else {
      throw InputError(source + ": unknown converter '" + name + "' (this segtrain knows: freeze, lora)");
    }
  }
  return converters;
}

Converters read_converters(const std::string& dir) {
  const fs::path path = fs::path(dir) / kConvertersFile;
  if (!fs::exists(path)) return {};
  return converters_from_json(read_file(path, "model converters"), path.string());
}

}  // namespace segtrain::models
