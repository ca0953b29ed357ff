#include "models/spec/model_config_json.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <type_traits>

#include "common/enum_names.h"
#include "common/error.h"
#include "common/file_io.h"

namespace segtrain::models {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

template <class T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

// j[key] as T. Integers must be JSON integers: nlohmann casts a float such as
// 1e300 to an integer type, which is undefined (UBSan, fuzz_model_config).
template <class T>
T value_of(const json& j, const char* key) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    if (!j[key].is_number_integer())
      throw json::type_error::create(302, std::string("\"") + key + "\" must be an integer, got " + j[key].dump(), &j);
  return j[key].get<T>();
}

// false, true, the first N blocks, or "auto" (config.h). A model_config.json from before N and
// auto holds a bool.
json checkpointing_json(const ActivationCheckpointing& a) {
  switch (a.kind) {
    case ActivationCheckpointing::Kind::none: return false;
    case ActivationCheckpointing::Kind::all: return true;
    case ActivationCheckpointing::Kind::first: return a.blocks;
    case ActivationCheckpointing::Kind::automatic: break;
  }
  return "auto";
}

ActivationCheckpointing checkpointing_from_json(const json& j, const char* key) {
  const json& v = j[key];
  if (v.is_boolean())
    return {v.get<bool>() ? ActivationCheckpointing::Kind::all : ActivationCheckpointing::Kind::none, 0};
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return ActivationCheckpointing::first_blocks(v.get<int64_t>());
  if (v.is_string() && v.get<std::string>() == "auto") return {ActivationCheckpointing::Kind::automatic, 0};
  throw json::type_error::create(302, std::string("\"") + key + "\" must be true, false, an integer >= 0 or \"auto\", got " +
                                          v.dump(), &j);
}

template <class T>
void get_opt(const json& j, const char* key, std::optional<T>& out) {
  if (j.contains(key)) out = j[key].is_null() ? std::nullopt : std::optional<T>(value_of<T>(j, key));
}

template <class T>
void get(const json& j, const char* key, T& out) {
  if (j.contains(key)) out = value_of<T>(j, key);
}

}  // namespace

std::string model_config_to_json(const ModelConfig& c) {
  json j = {{"arch", enum_name(kArchs, c.arch)},
            {"vocab_size", opt(c.vocab_size)},
            {"d_model", c.d_model},
            {"n_layers", c.n_layers},
            {"n_heads", c.n_heads},
            {"d_ff", opt(c.d_ff)},
            {"max_positions", opt(c.max_positions)},
            {"layer_norm_eps", c.layer_norm_eps},
            {"n_kv_heads", opt(c.n_kv_heads)},
            {"head_dim", opt(c.head_dim)},
            {"qkv_bias", c.qkv_bias},
            {"o_bias", c.o_bias},
            {"mlp_bias", c.mlp_bias},
            {"qk_norm", c.qk_norm},
            {"tie_embeddings", c.tie_embeddings},
            {"sliding_window", opt(c.sliding_window)},
            {"hf_model_type", opt(c.hf_model_type)},
            {"rope", {{"theta", c.rope.theta}, {"rotary_pct", c.rope.rotary_pct}}},
            {"extension",
             {{"method", enum_name(kExtensionMethods, c.extension.method)},
              {"factor", opt(c.extension.factor)},
              {"original_length", opt(c.extension.original_length)},
              {"yarn",
               {{"beta_fast", c.extension.yarn.beta_fast},
                {"beta_slow", c.extension.yarn.beta_slow},
                {"attention_factor", opt(c.extension.yarn.attention_factor)}}},
              {"llama3",
               {{"low_freq_factor", c.extension.llama3.low_freq_factor},
                {"high_freq_factor", c.extension.llama3.high_freq_factor}}},
              {"longrope",
               {{"short_factor", c.extension.longrope.short_factor},
                {"long_factor", c.extension.longrope.long_factor},
                {"attention_factor", opt(c.extension.longrope.attention_factor)}}}}},
            {"activation_checkpointing", checkpointing_json(c.activation_checkpointing)}};
  return j.dump(2) + "\n";
}

ModelConfig model_config_from_json(const std::string& text, const std::string& source) {
  ModelConfig c;
  try {
    const json j = json::parse(text);
    const auto arch = enum_from_name(kArchs, j.at("arch").get<std::string>());
    if (!arch) throw InputError(source + ": unknown arch " + j["arch"].dump() + " (expected " + enum_choices(kArchs) + ")");
    c.arch = *arch;
    get_opt(j, "vocab_size", c.vocab_size);
    get(j, "d_model", c.d_model);
    get(j, "n_layers", c.n_layers);
    get(j, "n_heads", c.n_heads);
    get_opt(j, "d_ff", c.d_ff);
    get_opt(j, "max_positions", c.max_positions);
    get(j, "layer_norm_eps", c.layer_norm_eps);
    get_opt(j, "n_kv_heads", c.n_kv_heads);
    get_opt(j, "head_dim", c.head_dim);
    get(j, "qkv_bias", c.qkv_bias);
    get(j, "o_bias", c.o_bias);
    get(j, "mlp_bias", c.mlp_bias);
    if (j.contains("qk_norm")) get(j, "qk_norm", c.qk_norm);  // from before Qwen3: false
    get(j, "tie_embeddings", c.tie_embeddings);
    get_opt(j, "sliding_window", c.sliding_window);
    get_opt(j, "hf_model_type", c.hf_model_type);  // absent before Phi-3: the first family that exports
    if (j.contains("rope")) {
      get(j["rope"], "theta", c.rope.theta);
      get(j["rope"], "rotary_pct", c.rope.rotary_pct);
    }
    if (j.contains("extension")) {
      const auto& e = j["extension"];
      if (e.contains("method")) {
        const auto m = enum_from_name(kExtensionMethods, e["method"].get<std::string>());
        if (!m) throw InputError(source + ": unknown extension.method " + e["method"].dump() + " (expected " +
                                 enum_choices(kExtensionMethods) + ")");
        c.extension.method = *m;
      }
      get_opt(e, "factor", c.extension.factor);
      get_opt(e, "original_length", c.extension.original_length);
      if (e.contains("yarn")) {
        get(e["yarn"], "beta_fast", c.extension.yarn.beta_fast);
        get(e["yarn"], "beta_slow", c.extension.yarn.beta_slow);
        get_opt(e["yarn"], "attention_factor", c.extension.yarn.attention_factor);
      }
      if (e.contains("llama3")) {
        get(e["llama3"], "low_freq_factor", c.extension.llama3.low_freq_factor);
        get(e["llama3"], "high_freq_factor", c.extension.llama3.high_freq_factor);
      }
      if (e.contains("longrope")) {
        get(e["longrope"], "short_factor", c.extension.longrope.short_factor);
        get(e["longrope"], "long_factor", c.extension.longrope.long_factor);
        get_opt(e["longrope"], "attention_factor", c.extension.longrope.attention_factor);
      }
    }
    if (j.contains("activation_checkpointing"))
      c.activation_checkpointing = checkpointing_from_json(j, "activation_checkpointing");
  } catch (const json::exception& e) {
    throw InputError(source + ": not a valid model_config.json (" + e.what() + ")");
  }
  return c;
}

std::string segtrain_model_folder(const std::string& dir) {
  const fs::path p(dir);
  if (!fs::exists(p / kModelConfigFile) && !fs::exists(p / "config.json") && fs::exists(p / "final" / kModelConfigFile))
    return (p / "final").string();  // a run directory
  return dir;
}

ModelConfig read_segtrain_model_config(const std::string& dir) {
  const fs::path path = fs::path(segtrain_model_folder(dir)) / kModelConfigFile;
  return model_config_from_json(read_file(path, "model config"), path.string());
}

}  // namespace segtrain::models
