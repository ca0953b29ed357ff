#include "models/converters/lora_record.h"

#include <algorithm>

#include "common/error.h"

namespace segtrain::models {

namespace {

using nlohmann::json;

bool string_list(const json& entry, const char* key) {
  return entry.contains(key) && entry[key].is_array() &&
         std::all_of(entry[key].begin(), entry[key].end(), [](const json& v) { return v.is_string(); });
}

}  // namespace

json lora_record(const LoraConfig& lora) {
  return {{"name", "lora"},           {"rank", lora.rank},       {"alpha", lora.alpha},
          {"dropout", lora.dropout}, {"targets", lora.targets}, {"trainable", lora.trainable}};
}

LoraConfig lora_from_record(const json& entry, const std::string& source) {
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
  lora.trainable = entry["trainable"].get<std::vector<std::string>>();
  return lora;
}

json peft_lora_fields(const LoraConfig& lora) {
  return {{"r", lora.rank},   {"lora_alpha", lora.alpha}, {"lora_dropout", lora.dropout},
          {"use_rslora", false}, {"use_dora", false}};
}

}  // namespace segtrain::models
