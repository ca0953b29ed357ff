#pragma once
// Model converters: what changes a model between building (or loading) it and
// training it, as torchtitan's model converters do: freezing parameters (freeze.h),
// adapters, quantized storage. A converter changes the model in place, says what
// a checkpoint keeps of it (converters.json, beside model.safetensors) and what
// the trained weights become outside training (fold: the same weights for
// freezing; an adapter merges into the weights it adapts).
//
// The trainable set is what requires a gradient after conversion
// (trainable_parameters): the optimizer, the gradient buckets and the
// optimizer's checkpoint shards all take it from there. Loading a model
// directory (models/modules/model_io.h load_model) folds the converters its converters.json
// names, so eval, generate, export and a checkpoint: base see a plain model.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/modules/transformer.h"
#include "models/spec/converters/lora_config.h"

namespace segtrain::models {

class ModelConverter {
 public:
  virtual ~ModelConverter() = default;
  // Its name in converters.json and in messages.
  virtual std::string name() const = 0;
  // The run config's key that asks for it ("train.freeze"), which its errors are reported at.
  virtual std::string config_key() const = 0;
  // Changes `model` in place (freezes, wraps, adds parameters). Throws
  // InputError when its settings do not fit this model.
  virtual void convert(TransformerLM& model) const = 0;
  // What a checkpoint keeps to redo the conversion: {"name": name(), settings...}.
  virtual nlohmann::json to_json() const = 0;
  // The weights of the plain model, from the converted model's (named as its
  // parameters): unchanged unless the converter added parameters.
  virtual std::map<std::string, at::Tensor> fold(std::map<std::string, at::Tensor> weights) const { return weights; }
};

using Converters = std::vector<std::unique_ptr<ModelConverter>>;

// What a run asks its converters for, each converter's settings as the run config reads them.
struct ConverterSettings {
  LoraConfig lora;                  // model.adapters.lora, train.trainable
  std::vector<std::string> freeze;  // train.freeze
};

// A converter segtrain knows: its name in converters.json, the run config's key that asks for
// it, and how it is made from a run's settings (nullptr: the run does not ask for it) and from
// its converters.json entry (InputError naming `source` when the entry does not fit).
struct ConverterKind {
  std::string name;
  std::string config_key;
  std::unique_ptr<ModelConverter> (*from_settings)(const ConverterSettings& settings);
  std::unique_ptr<ModelConverter> (*from_json)(const nlohmann::json& entry, const std::string& source);
};

// The registry (registry.cpp): every converter, in the order a run applies them.
const std::vector<ConverterKind>& converter_kinds();
// The converters `settings` asks for, in the registry's order.
Converters make_converters(const ConverterSettings& settings);

// The file a converted model's directory (a checkpoint, final/) records its converters in.
inline constexpr const char* kConvertersFile = "converters.json";

// Each converter's convert(), in order.
void apply_converters(const Converters& converters, TransformerLM& model);
// The parameters that train (require a gradient), in registration order.
std::vector<std::pair<std::string, at::Tensor>> trainable_parameters(const TransformerLM& model);
// Folds every converter, last first.
std::map<std::string, at::Tensor> fold_converters(const Converters& converters,
                                                  std::map<std::string, at::Tensor> weights);

// converters.json: {"converters": [each one's to_json()]}.
std::string converters_to_json(const Converters& converters);
// Rebuilds them by the registry; InputError naming `source` and the known names
// for a converter segtrain does not know.
Converters converters_from_json(const std::string& text, const std::string& source);
// The converters recorded in `dir`; none when it has no converters.json.
Converters read_converters(const std::string& dir);

}  // namespace segtrain::models
