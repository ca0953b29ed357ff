#include "trainer/model_setup.h"

#include <torch/utils.h>  // torch::manual_seed

#include <cmath>

#include "common/error.h"
#include "models/model_io.h"
#include "models/positions.h"
#include "trainer/config_schema.h"

namespace segtrain::trainer {
namespace {

// Keys that describe the base model's shape; a non-scratch run may only repeat them.
const char* const kArchitectureKeys[] = {"model.arch",    "model.vocab_size",     "model.d_model",
                                         "model.n_layers", "model.n_heads",       "model.d_ff",
                                         "model.max_positions", "model.layer_norm_eps", "model.rope.theta",
                                         "model.rope.rotary_pct"};

// The YAML text of one key of a Config, for comparisons and messages.
std::string value_of(const Config& config, const std::string& key) {
  Config copy = config;
  for (auto& f : schema::fields(copy))
    if (f.path == key) {
      YAML::Emitter out;
      out << f.emit();
      return out.c_str();
    }
  return "?";
}

}  // namespace

std::string init_dir(const std::string& init) {
  if (init.rfind("hf:", 0) == 0) return init.substr(3);
  if (init.rfind("checkpoint:", 0) == 0) return init.substr(11);
  return "";
}

models::ModelConfig resolve_model_config(const LoadedConfig& loaded, int64_t store_vocab_size) {
  const Config& c = loaded.config;
  models::ModelConfig m = c.model.spec;
  const std::string base_dir = init_dir(c.model.init);
  if (base_dir.empty()) {
    if (!m.vocab_size) m.vocab_size = store_vocab_size;
    if (!m.d_ff) m.d_ff = 4 * m.d_model;
    if (!m.max_positions) m.max_positions = c.data.train_length;
  } else {
    m = models::read_model_config(base_dir);
    // Explicit architecture keys must describe the base, not silently be ignored.
    Config base_as_run = c;
    base_as_run.model.spec = m;
    std::vector<std::string> conflicts;
    for (const char* key : kArchitectureKeys) {
      if (!loaded.origins.count(key)) continue;
      const std::string mine = value_of(c, key), theirs = value_of(base_as_run, key);
      if (mine != theirs && mine != "auto")
        conflicts.push_back(loaded.origins.at(key) + ": " + key + ": " + mine + " conflicts with the base model's " +
                            theirs + " (" + c.model.init + "); remove the key or make it match");
    }
    if (!conflicts.empty()) {
      std::string message;
      for (const auto& line : conflicts) message += (message.empty() ? "" : "\n") + line;
      throw InputError(message);
    }
    if (loaded.origins.count("model.extension.method")) m.extension = c.model.spec.extension;
  }
  m.activation_checkpointing = c.model.spec.activation_checkpointing;
  if (m.extension.method != models::ExtensionMethod::none && !m.extension.factor)
    m.extension.factor = static_cast<double>(c.data.extended_length) / static_cast<double>(c.data.train_length);
  if (*m.vocab_size < store_vocab_size)
    throw InputError("model.vocab_size: the model has " + std::to_string(*m.vocab_size) +
                     " tokens but the store '" + c.data.store + "' uses " + std::to_string(store_vocab_size) +
                     "; token ids would be out of range");
  models::check_model_config(m);
  return m;
}

models::TransformerLM build_model(const LoadedConfig& loaded, const models::ModelConfig& model_config) {
  const std::string base_dir = init_dir(loaded.config.model.init);
  if (base_dir.empty()) {
    torch::manual_seed(static_cast<uint64_t>(loaded.config.run.seed));
    return models::TransformerLM(model_config);
  }
  return models::load_model(base_dir, model_config);
}

}  // namespace segtrain::trainer
