#include "models/spec/families/hf_config_fields.h"

#include <cmath>

#include "models/spec/auto_values.h"

namespace segtrain::models::hf {

int64_t hidden_size(const json& j, const std::string& key, const std::string& source) {
  const auto size = field<int64_t>(j, key, source);
  if (size < 1 || size > (int64_t{1} << 40))
    throw InputError(source + ": field \"" + key + "\" must be in [1, 2^40], got " + std::to_string(size));
  return size;
}

void require(bool ok, const std::string& source, const std::string& what) {
  if (!ok) throw InputError(source + ": " + what + " is not supported by segtrain's TransformerLM");
}

json rope_settings(const json& cfg) {
  json rope = json::object();
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (cfg.contains(key) && cfg[key].is_object())
      for (const auto& [k, v] : cfg[key].items()) rope[k] = v;
  return rope;
}

void read_rope_scaling(const json& cfg, const json& rope, ModelConfig& c, const std::string& source) {
  std::string rope_type = field_or<std::string>(rope, "rope_type", field_or<std::string>(rope, "type", "default",
                                                source), source);
  if (rope_type == "linear") {
    c.extension.method = ExtensionMethod::interpolate;
    c.extension.factor = field<double>(rope, "factor", source + " rope_parameters");
    c.extension.original_length = field_or<int64_t>(rope, "original_max_position_embeddings",
        static_cast<int64_t>(std::llround(static_cast<double>(*c.max_positions) / *c.extension.factor)), source);
  } else if (rope_type == "dynamic") {
    c.extension.method = ExtensionMethod::dynamic_ntk;
    c.extension.factor = field<double>(rope, "factor", source + " rope_parameters");
    c.extension.original_length = *c.max_positions;  // transformers' threshold
  } else if (rope_type == "yarn") {
    c.extension.method = ExtensionMethod::yarn;
    c.extension.original_length = field_or<int64_t>(rope, "original_max_position_embeddings", *c.max_positions,
                                                    source);
    c.extension.factor = field_or<double>(rope, "factor", static_cast<double>(*c.max_positions) /
                                          static_cast<double>(*c.extension.original_length), source);
    c.extension.yarn.beta_fast = field_or<double>(rope, "beta_fast", 32.0, source);
    c.extension.yarn.beta_slow = field_or<double>(rope, "beta_slow", 1.0, source);
    if (rope.contains("attention_factor") && !rope["attention_factor"].is_null())
      c.extension.yarn.attention_factor = field<double>(rope, "attention_factor", source);
    require(!rope.contains("mscale") || rope["mscale"].is_null(), source, "yarn mscale");
    require(field_or<bool>(rope, "truncate", true, source), source, "yarn truncate=false");
  } else if (rope_type == "llama3") {
    c.extension.method = ExtensionMethod::llama3;
    c.extension.factor = field<double>(rope, "factor", source + " rope_scaling");
    c.extension.original_length = field_or<int64_t>(rope, "original_max_position_embeddings", *c.max_positions,
                                                    source);
    c.extension.llama3.low_freq_factor = field<double>(rope, "low_freq_factor", source + " rope_scaling");
    c.extension.llama3.high_freq_factor = field<double>(rope, "high_freq_factor", source + " rope_scaling");
  } else if (rope_type == "longrope") {
    // Phi-3 keeps the pretrained length at the top level; it wins, as in transformers.
    c.extension.method = ExtensionMethod::longrope;
    c.extension.original_length = field_or<int64_t>(
        cfg, "original_max_position_embeddings",
        field_or<int64_t>(rope, "original_max_position_embeddings", *c.max_positions, source), source);
    c.extension.factor = field_or<double>(rope, "factor", static_cast<double>(*c.max_positions) /
                                          static_cast<double>(*c.extension.original_length), source);
    c.extension.longrope.short_factor = field<std::vector<double>>(rope, "short_factor", source + " rope_scaling");
    c.extension.longrope.long_factor = field<std::vector<double>>(rope, "long_factor", source + " rope_scaling");
    if (rope.contains("attention_factor") && !rope["attention_factor"].is_null())
      c.extension.longrope.attention_factor = field<double>(rope, "attention_factor", source);
  } else if (rope_type != "default") {
    throw InputError(source + ": rope_scaling rope_type \"" + rope_type +
                     "\" is not supported by segtrain (supported: default, linear, dynamic, yarn, llama3, longrope)");
  }
}

void read_standard_sizes(const json& cfg, Arch arch, ModelConfig& c, const std::string& source) {
  c.arch = arch;
  c.vocab_size = field<int64_t>(cfg, "vocab_size", source);
  c.d_model = field<int64_t>(cfg, "hidden_size", source);
  c.n_layers = field<int64_t>(cfg, "num_hidden_layers", source);
  c.n_heads = field<int64_t>(cfg, "num_attention_heads", source);
  c.d_ff = field<int64_t>(cfg, "intermediate_size", source);
}

RopeExport rope_export(const ModelConfig& c, double rotary_pct) {
  const auto method = c.extension.method;
  const int64_t lt = original_length_of(c);
  const int64_t le = static_cast<int64_t>(std::llround(factor_of(c) * static_cast<double>(lt)));
  RopeExport out;
  out.theta = c.rope.theta;
  out.max_positions = max_positions_of(c);
  json scaling = json::object();
  const auto scaled = [&](const char* type) {
    scaling = {{"rope_type", type}, {"factor", factor_of(c)}};
    out.max_positions = le;
  };
  // yarn, llama3 and longrope read the length the base was trained at from the block.
  const auto scaled_from_original = [&](const char* type) {
    scaled(type);
    scaling["original_max_position_embeddings"] = lt;
  };
  switch (method) {
    case ExtensionMethod::none: break;
    case ExtensionMethod::interpolate:
      // 4.x and 5.x both warn about original_max_position_embeddings in a linear block:
      // the original length is in config.json's "segtrain" field instead.
      scaled("linear");
      break;
    case ExtensionMethod::ntk:
      // Static NTK-aware scaling only changes the base, which default rope takes as is.
      out.theta = ntk_base(c), out.max_positions = le;
      out.note = "ntk exported as default rope with rope_theta = theta * factor^(d/(d-2))";
      break;
    case ExtensionMethod::dynamic_ntk:
      scaled("dynamic");
      out.max_positions = lt;  // transformers' threshold for growing the base
      out.note = "transformers caches the grown base across calls; each call alone matches segtrain";
      break;
    case ExtensionMethod::yarn:
      scaled_from_original("yarn");
      scaling["beta_fast"] = c.extension.yarn.beta_fast, scaling["beta_slow"] = c.extension.yarn.beta_slow;
      if (c.extension.yarn.attention_factor) scaling["attention_factor"] = *c.extension.yarn.attention_factor;
      break;
    case ExtensionMethod::llama3:
      scaled_from_original("llama3");
      scaling["low_freq_factor"] = c.extension.llama3.low_freq_factor;
      scaling["high_freq_factor"] = c.extension.llama3.high_freq_factor;
      break;
    case ExtensionMethod::longrope:
      // 4.x reads the original length only at the top level (Phi-3's layout), 5.x there first.
      scaled_from_original("longrope");
      scaling["short_factor"] = c.extension.longrope.short_factor;
      scaling["long_factor"] = c.extension.longrope.long_factor;
      if (c.extension.longrope.attention_factor) scaling["attention_factor"] = *c.extension.longrope.attention_factor;
      out.original_length = lt;
      break;
    default: break;
  }
  out.scaling = scaling.empty() ? json(nullptr) : scaling;
  out.parameters = scaling.empty() ? json{{"rope_type", "default"}} : scaling;
  out.parameters["rope_theta"] = out.theta;
  if (rotary_pct != 1.0) out.parameters["partial_rotary_factor"] = rotary_pct;
  return out;
}

}  // namespace segtrain::models::hf
