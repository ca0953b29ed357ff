// Every family segtrain reads and writes: one line each. A family's file defines
// its function; nothing else names it.
#include <stdexcept>
#include <vector>

#include "common/error.h"
#include "models/spec/families/family.h"

namespace segtrain::models {

const Family& gpt2_family();
const Family& gpt_neox_family();
const Family& bloom_family();
const Family& llama_family();
const Family& mistral_family();
const Family& qwen2_family();
const Family& qwen3_family();
const Family& phi3_family();

namespace {

const std::vector<const Family*>& families() {
  // Asked in this order which family exports a model: the first that takes it (after
  // the family it was read as). Phi-3 comes last: it takes only models read as Phi-3.
  static const std::vector<const Family*> all = {&gpt2_family(),    &gpt_neox_family(), &bloom_family(),
                                                 &qwen3_family(),   &llama_family(),    &mistral_family(),
                                                 &qwen2_family(),   &phi3_family()};
  return all;
}

}  // namespace

std::string supported_model_types() {
  std::string out;
  for (const Family* f : families()) out += (out.empty() ? "" : ", ") + std::string(f->model_type());
  return out;
}

const Family& family_for_model_type(const std::string& model_type, const std::string& source) {
  for (const Family* f : families())
    if (model_type == f->model_type()) return *f;
  throw InputError(source + ": model_type \"" + model_type + "\" is not supported (expected one of " +
                   supported_model_types() + ")");
}

const Family& family_for_export(const ModelConfig& c) {
  // The family a model was read as writes it again where it can (Phi-3 stays Phi-3).
  for (const Family* f : families())
    if (c.hf_model_type == f->model_type() && f->exports(c)) return *f;
  for (const Family* f : families())
    if (f->exports(c)) return *f;
  throw std::logic_error("no model family exports model.arch " + std::string(enum_name(kArchs, c.arch)));
}

}  // namespace segtrain::models
