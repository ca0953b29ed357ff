#pragma once
// `model.init` and an experiment corpus's `base`: where a model comes from.
#include <optional>
#include <string>

#include "models/spec/config.h"

namespace segtrain::trainer {

struct ModelRef {
  enum class Kind { scratch, hf, checkpoint, peft };
  Kind kind = Kind::scratch;
  // The model's folder after "hf:" / "checkpoint:"; for "peft:" the base its adapter_config.json
  // names (models/spec/families/peft_config.h find_peft_base), "" when it is not there. Empty for scratch.
  std::string dir;
  std::string adapter;  // peft: the adapter's folder after "peft:"

  bool from_folder() const { return kind != Kind::scratch; }
  // What the folder must contain, and what it is, for messages.
  const char* marker_file() const {
    return kind == Kind::checkpoint ? "model_config.json" : kind == Kind::peft ? "adapter_config.json" : "config.json";
  }
  const char* description() const {
    return kind == Kind::hf ? "a transformers model"
           : kind == Kind::peft ? "a PEFT LoRA adapter"
                                : "a segtrain checkpoint or run";
  }
};

// "scratch", "hf:DIR", "checkpoint:DIR" or "peft:DIR" (its base found through its
// adapter_config.json); nullopt for anything else.
std::optional<ModelRef> parse_model_ref(const std::string& text);

// The folder of a reference that parses, else "" (scratch and malformed ones).
std::string model_ref_dir(const std::string& text);

// A folder a run records (data.store, model.init's), absolute and with links and `..` resolved
// where they exist, so that the run's config.yaml names the same folder from any working
// directory, and two spellings of one folder compare equal on resume.
std::string absolute_folder(const std::string& path);
// `text` with its folder made absolute_folder; scratch (or anything that does not parse) as it is.
std::string with_absolute_folder(const std::string& text);

// The architecture of the model a reference names, read from the folder without
// loading it (the family of config.json's model_type: models/spec/families/hf_config.h, or
// model_config.json's arch of a segtrain checkpoint or run); nullopt for scratch, a missing
// folder or one that says none (the validator and the model reader report those).
std::optional<models::Arch> model_ref_arch(const std::string& text);

}  // namespace segtrain::trainer
