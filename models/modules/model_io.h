#pragma once
// Where models live on disk. segtrain's own model directory is model.safetensors
// (TransformerLM's parameter names) + model_config.json (ModelConfig as JSON);
// checkpoints and run outputs use it. HF folders are read through models/modules/hf.h.
// Both are recognised by content, not by name.
#include <map>
#include <optional>
#include <string>

#include "models/modules/transformer.h"
#include "models/spec/config.h"
#include "models/spec/model_config_json.h"  // model_config.json, which a segtrain model directory holds

namespace segtrain::models {

enum class ModelFormat { segtrain, hf };

// segtrain when DIR has model_config.json, hf when it has config.json; a run
// directory resolves to its final/ (DIR itself is returned in *resolved).
std::optional<ModelFormat> detect_model_format(const std::string& dir, std::string* resolved = nullptr);

// The ModelConfig stored in DIR (either format). Throws InputError when DIR is
// neither.
ModelConfig read_model_config(const std::string& dir);

// Builds a model for `config` (default: the stored one, e.g. after applying
// --set model.extension... overrides) and loads DIR's weights into it, drawing no
// random numbers and reading one tensor at a time (fp32, or as stored: dtype). A gpt2
// table of the original length is interpolated when the config extends it.
// An info line says what it reads and from where (a converted run's base too) before it starts,
// and one how long that took and the peak host memory after; `say_time` false leaves the second
// to the caller (training says it with the conversion that follows).
TransformerLM load_model(const std::string& dir, const std::optional<ModelConfig>& config = std::nullopt,
                         WeightDtype dtype = WeightDtype::fp32, bool say_time = true);

// The tensors of a converted model's directory as its converters made them (not folded):
// what it saved, over its base's when it saved only what trained (base.json,
// models/spec/base_record.h: the base is read with `config` after its files are checked).
std::map<std::string, at::Tensor> converted_tensors(const std::string& dir, const ModelConfig& config);

// segtrain model directory: model.safetensors + model_config.json, each written
// to a temporary sibling and renamed.
void save_model_dir(const TransformerLM& model, const std::string& dir);
// The same for a model's config and weights held elsewhere (fp32 master weights).
void save_model_dir(const ModelConfig& config, const std::map<std::string, at::Tensor>& tensors,
                    const std::string& dir);

}  // namespace segtrain::models
