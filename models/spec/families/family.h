#pragma once
// A model family: how transformers configures and names one kind of checkpoint, in
// both directions (torchtitan's per-model state-dict adapter, in the spirit). Each
// family is one file of this folder plus one line of the registry (registry.cpp);
// import (hf_config.h read_hf_config, models/modules/hf.h read_hf_tensors), export
// (export_hf) and the error messages read the registry and never name a family.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "models/spec/config.h"
#include "models/spec/families/hf_names.h"

namespace segtrain::models {

// A family's config.json for an export, and what transformers makes of it.
struct HfConfigOut {
  nlohmann::json config;
  bool transformers_reproduces = true;  // false: the extension is segtrain's alone (the note says why)
  std::string note;                     // what differs from segtrain, if anything
};

class Family {
 public:
  virtual ~Family() = default;
  // The HF model_type it reads and writes ("llama", "mistral").
  virtual const char* model_type() const = 0;
  // The blocks it builds (model.arch): families that share Llama's block say llama.
  virtual Arch arch() const = 0;
  // The ModelConfig of config.json `cfg` (read from `source`, which errors name):
  // InputError naming the field on what segtrain's blocks cannot reproduce.
  virtual ModelConfig read_config(const nlohmann::json& cfg, const std::string& source) const = 0;
  // Whether this family exports `c` (the registry asks the family `c` was read as, then
  // each in turn; the first takes it).
  virtual bool exports(const ModelConfig& c) const = 0;
  virtual HfConfigOut write_config(const ModelConfig& c) const = 0;
  // transformers' tensor names, one table for both directions.
  virtual const HfNameTable& names() const = 0;
};

// The family that reads config.json's `model_type`; InputError naming `source`
// and every model_type segtrain reads when none does.
const Family& family_for_model_type(const std::string& model_type, const std::string& source);

// The family an export of `c` is written as: the one it was read as (c.hf_model_type)
// when that family exports it, else the first in the registry's order that does.
const Family& family_for_export(const ModelConfig& c);

// Every model_type segtrain reads, in the registry's order ("gpt2, gpt_neox, ...").
std::string supported_model_types();

}  // namespace segtrain::models
