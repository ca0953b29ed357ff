#include "models/hf.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <optional>
#include <set>
#include <type_traits>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/log.h"
#include "models/hf_names.h"
#include "models/positions.h"

namespace segtrain::models {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The table row for one of our parameter names, and its full HF key.
std::pair<const HfTensorName*, std::string> hf_key(const HfNameTable& table, const std::string& ours) {
  for (const auto& row : table.tensors)
    if (auto hf = rename_slot(row.ours, row.hf, ours)) return {&row, (row.prefixed ? table.prefix : "") + *hf};
  throw std::logic_error("no HF name for parameter " + ours);
}

bool ignored(const HfNameTable& table, const std::string& key) {
  for (const auto& buffer : table.ignored)
    if (key == buffer || key.ends_with("." + buffer)) return true;
  return false;
}

json read_json(const fs::path& path) {
  const std::string text = read_file(path, "HF config");
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(path.string() + ": not valid JSON (" + e.what() + ")");
  }
}

template <class T>
T field(const json& j, const std::string& key, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) throw InputError(source + ": missing field \"" + key + "\"");
  // nlohmann casts a float such as 1e300 to an integer type, which is undefined (UBSan, fuzz_hf_config).
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    if (!j[key].is_number_integer())
      throw InputError(source + ": field \"" + key + "\" must be an integer (" + j[key].dump() + ")");
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    throw InputError(source + ": field \"" + key + "\" has the wrong type (" + j[key].dump() + ")");
  }
}

template <class T>
T field_or(const json& j, const std::string& key, T fallback, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  return field<T>(j, key, source);
}

// A hidden size: at most 2^40, so the 4 * hidden_size MLP width and the shapes
// built from it cannot overflow (UBSan, fuzz_hf_config).
int64_t hidden_size(const json& j, const std::string& key, const std::string& source) {
  const auto size = field<int64_t>(j, key, source);
  if (size < 1 || size > (int64_t{1} << 40))
    throw InputError(source + ": field \"" + key + "\" must be in [1, 2^40], got " + std::to_string(size));
  return size;
}

void require(bool ok, const std::string& source, const std::string& what) {
  if (!ok) throw InputError(source + ": " + what + " is not supported by segtrain's TransformerLM");
}

// What an HF "segtrain" field recorded, to restore methods transformers cannot express.
void restore_extension(const json& cfg, ModelConfig& c, const std::string& source) {
  if (!cfg.contains("segtrain") || !cfg["segtrain"].is_object()) return;
  const auto& s = cfg["segtrain"];
  if (s.value("transformers_reproduces", true) || !s.contains("extension")) return;
  const auto& e = s["extension"];
  auto method = enum_from_name(kExtensionMethods, field<std::string>(e, "method", source));
  if (!method) throw InputError(source + ": unknown segtrain.extension.method " + e["method"].dump());
  c.extension.method = *method;
  if (e.contains("factor") && !e["factor"].is_null()) c.extension.factor = field<double>(e, "factor", source);
  if (e.contains("original_length") && !e["original_length"].is_null())
    c.extension.original_length = field<int64_t>(e, "original_length", source);
}

// transformers 5 nests rope settings in rope_parameters; older files use
// rope_theta / rotary_pct / rotary_emb_base at the top and a rope_scaling block.
// With both, rope_scaling's keys win, as transformers 5 takes that block first.
json rope_settings(const json& cfg) {
  json rope = json::object();
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (cfg.contains(key) && cfg[key].is_object())
      for (const auto& [k, v] : cfg[key].items()) rope[k] = v;
  return rope;
}

// The rope_type of a rope_scaling / rope_parameters block as an extension method.
// Types segtrain does not implement are refused, never ignored.
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

// The sizes under transformers' standard names (GPT-NeoX and the Llama family).
void read_standard_sizes(const json& cfg, Arch arch, ModelConfig& c, const std::string& source) {
  c.arch = arch;
  c.vocab_size = field<int64_t>(cfg, "vocab_size", source);
  c.d_model = field<int64_t>(cfg, "hidden_size", source);
  c.n_layers = field<int64_t>(cfg, "num_hidden_layers", source);
  c.n_heads = field<int64_t>(cfg, "num_attention_heads", source);
  c.d_ff = field<int64_t>(cfg, "intermediate_size", source);
}

// LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM: one block layout;
// the families differ in biases (Llama: attention_bias on q/k/v/o and mlp_bias;
// Qwen2: always on q/k/v, never on o; Mistral: none), defaults and sliding windows.
void read_llama_family(const json& cfg, const std::string& type, ModelConfig& c, const std::string& source) {
  read_standard_sizes(cfg, Arch::llama, c, source);
  require(c.n_heads > 0, source, "num_attention_heads <= 0");
  c.n_kv_heads = field_or<int64_t>(cfg, "num_key_value_heads", c.n_heads, source);
  c.head_dim = field_or<int64_t>(cfg, "head_dim", c.d_model / c.n_heads, source);
  const int64_t default_positions = type == "llama" ? 2048 : type == "mistral" ? 4096 * 32 : 32768;
  c.max_positions = field_or<int64_t>(cfg, "max_position_embeddings", default_positions, source);
  c.layer_norm_eps = field_or<double>(cfg, "rms_norm_eps", 1e-6, source);
  const auto act = field_or<std::string>(cfg, "hidden_act", "silu", source);
  require(act == "silu", source, "hidden_act \"" + act + "\"");
  c.tie_embeddings = field_or<bool>(cfg, "tie_word_embeddings", false, source);
  if (type == "llama") {
    c.qkv_bias = c.o_bias = field_or<bool>(cfg, "attention_bias", false, source);
    c.mlp_bias = field_or<bool>(cfg, "mlp_bias", false, source);
  } else if (type == "qwen2") {
    c.qkv_bias = true;
  }
  // Mistral: every layer slides when sliding_window is set. Qwen2: layers listed
  // as sliding_attention in layer_types (transformers 5 writes them), or else the
  // layers from max_window_layers on when use_sliding_window is true.
  if (type == "mistral" && cfg.contains("sliding_window") && !cfg["sliding_window"].is_null()) {
    c.sliding_window = field<int64_t>(cfg, "sliding_window", source);
  } else if (type == "qwen2" && cfg.contains("sliding_window") && !cfg["sliding_window"].is_null()) {
    bool slides = field_or<bool>(cfg, "use_sliding_window", false, source) &&
                  field_or<int64_t>(cfg, "max_window_layers", 28, source) < c.n_layers;
    if (cfg.contains("layer_types") && cfg["layer_types"].is_array()) {
      slides = false;
      for (const auto& layer : cfg["layer_types"]) slides = slides || layer == "sliding_attention";
    }
    if (slides) c.sliding_window = field<int64_t>(cfg, "sliding_window", source);
  }
  const json rope = rope_settings(cfg);
  const double partial = field_or<double>(rope, "partial_rotary_factor",
                                          field_or<double>(cfg, "partial_rotary_factor", 1.0, source), source);
  require(partial == 1.0, source, "partial_rotary_factor " + json(partial).dump() + " on a " + type + " model");
  c.rope.rotary_pct = 1.0;
  c.rope.theta = field_or<double>(rope, "rope_theta", field_or<double>(cfg, "rope_theta", 10000.0, source), source);
  read_rope_scaling(cfg, rope, c, source);
}

// RoPE settings of an export in both of transformers' spellings, so 4.4x and 5.x
// load the folder alike: a 4.x "rope_scaling" block holding only the keys its
// validator knows for the rope_type (null for default rope) beside a top-level
// rope_theta, and the same as transformers 5's "rope_parameters" (which 5.x reads
// from rope_scaling too when both are there).
struct RopeExport {
  json scaling;                  // rope_scaling: null or {rope_type, factor, ...}
  json parameters;               // rope_parameters: scaling + rope_theta + partial_rotary_factor
  double theta = 0;
  int64_t max_positions = 0;     // max_position_embeddings: the extended length where it applies
  std::optional<int64_t> original_length;  // top-level original_max_position_embeddings (longrope)
  std::string note;              // what differs from segtrain, if anything
};

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
      out.theta = rope_params(c, le).base, out.max_positions = le;
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

// config.json of a llama model: LlamaForCausalLM, or Qwen2ForCausalLM for
// biases on q/k/v only (Llama's attention_bias covers o too), or
// MistralForCausalLM when the model carries a sliding window.
json llama_export(const ModelConfig& c, std::string& note) {
  const RopeExport rope = rope_export(c, 1.0);
  note = rope.note;
  const bool qwen2 = c.qkv_bias && !c.o_bias;
  if (c.o_bias && !c.qkv_bias)
    throw InputError("export: a bias on o_proj without q/k/v biases has no transformers architecture "
                     "(Llama's attention_bias sets all four)");
  if (qwen2 && c.mlp_bias) throw InputError("export: Qwen2 (q/k/v biases) has no mlp_bias");
  if (c.sliding_window && (qwen2 || c.qkv_bias || c.mlp_bias))
    throw InputError("export: a sliding window is exported as MistralForCausalLM, which has no biases");
  const std::string type = c.sliding_window ? "mistral" : qwen2 ? "qwen2" : "llama";
  const std::string cls = c.sliding_window ? "MistralForCausalLM" : qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  json cfg = {{"architectures", {cls}}, {"model_type", type}, {"vocab_size", vocab_size_of(c)},
              {"hidden_size", c.d_model}, {"intermediate_size", d_ff_of(c)}, {"num_hidden_layers", c.n_layers},
              {"num_attention_heads", c.n_heads}, {"num_key_value_heads", n_kv_heads_of(c)},
              {"head_dim", head_dim_of(c)}, {"hidden_act", "silu"}, {"max_position_embeddings", rope.max_positions},
              {"rms_norm_eps", c.layer_norm_eps}, {"tie_word_embeddings", c.tie_embeddings},
              {"attention_dropout", 0.0}, {"rope_theta", rope.theta}, {"rope_scaling", rope.scaling},
              {"rope_parameters", rope.parameters}};
  if (rope.original_length) cfg["original_max_position_embeddings"] = *rope.original_length;
  if (type == "llama") cfg["attention_bias"] = c.qkv_bias, cfg["mlp_bias"] = c.mlp_bias;
  if (type == "qwen2") cfg["use_sliding_window"] = false, cfg["sliding_window"] = nullptr;
  if (type == "mistral") cfg["sliding_window"] = *c.sliding_window;
  return cfg;
}

}  // namespace

ModelConfig read_hf_config(const std::string& dir) {
  const fs::path path = fs::path(dir) / "config.json";
  const std::string source = path.string();
  const json cfg = read_json(path);
  const auto type = field<std::string>(cfg, "model_type", source);
  ModelConfig c;
  const auto arch = arch_of_hf_model_type(type);
  if (!arch)
    throw InputError(source + ": model_type \"" + type + "\" is not supported (expected gpt2, gpt_neox, bloom, llama, mistral or qwen2)");
  if (*arch == Arch::gpt2) {
    c.arch = Arch::gpt2;
    c.vocab_size = field<int64_t>(cfg, "vocab_size", source);
    c.d_model = hidden_size(cfg, "n_embd", source);
    c.n_layers = field<int64_t>(cfg, "n_layer", source);
    c.n_heads = field<int64_t>(cfg, "n_head", source);
    c.d_ff = field_or<int64_t>(cfg, "n_inner", 4 * c.d_model, source);
    c.max_positions = field<int64_t>(cfg, "n_positions", source);
    c.layer_norm_eps = field_or<double>(cfg, "layer_norm_epsilon", 1e-5, source);
    const auto act = field_or<std::string>(cfg, "activation_function", "gelu_new", source);
    require(act == "gelu_new" || act == "gelu_pytorch_tanh", source, "activation_function \"" + act + "\"");
    require(!field_or<bool>(cfg, "scale_attn_by_inverse_layer_idx", false, source), source,
            "scale_attn_by_inverse_layer_idx");
    require(field_or<bool>(cfg, "scale_attn_weights", true, source), source, "scale_attn_weights=false");
    require(field_or<bool>(cfg, "tie_word_embeddings", true, source), source, "an untied gpt2 head");
  } else if (*arch == Arch::gpt_neox) {
    read_standard_sizes(cfg, Arch::gpt_neox, c, source);
    c.max_positions = field_or<int64_t>(cfg, "max_position_embeddings", 2048, source);
    c.layer_norm_eps = field_or<double>(cfg, "layer_norm_eps", 1e-5, source);
    const auto act = field_or<std::string>(cfg, "hidden_act", "gelu", source);
    require(act == "gelu", source, "hidden_act \"" + act + "\"");
    require(field_or<bool>(cfg, "use_parallel_residual", true, source), source, "use_parallel_residual=false");
    require(!field_or<bool>(cfg, "tie_word_embeddings", false, source), source, "a tied gpt_neox head");
    require(field_or<bool>(cfg, "attention_bias", true, source), source, "attention_bias=false");
    const json rope = rope_settings(cfg);
    c.rope.rotary_pct = field_or<double>(rope, "partial_rotary_factor",
                                         field_or<double>(cfg, "rotary_pct", 0.25, source), source);
    c.rope.theta = field_or<double>(rope, "rope_theta", field_or<double>(cfg, "rotary_emb_base",
                                    field_or<double>(cfg, "rope_theta", 10000.0, source), source), source);
    read_rope_scaling(cfg, rope, c, source);
  } else if (*arch == Arch::llama) {
    read_llama_family(cfg, type, c, source);
  } else {
    c.arch = Arch::bloom;
    c.vocab_size = field<int64_t>(cfg, "vocab_size", source);
    c.d_model = cfg.contains("hidden_size") ? hidden_size(cfg, "hidden_size", source)
                                            : hidden_size(cfg, "n_embed", source);
    c.n_layers = cfg.contains("n_layer") ? field<int64_t>(cfg, "n_layer", source)
                                         : field<int64_t>(cfg, "num_hidden_layers", source);
    c.n_heads = cfg.contains("n_head") ? field<int64_t>(cfg, "n_head", source)
                                       : field<int64_t>(cfg, "num_attention_heads", source);
    c.d_ff = 4 * c.d_model;
    c.layer_norm_eps = field_or<double>(cfg, "layer_norm_epsilon", 1e-5, source);
    // BLOOM configs carry no trained length; BLOOM itself was trained at 2048.
    int64_t trained = field_or<int64_t>(cfg, "seq_length", 2048, source);
    if (cfg.contains("segtrain") && cfg["segtrain"].contains("max_positions"))
      trained = field<int64_t>(cfg["segtrain"], "max_positions", source);
    c.max_positions = trained;
    require(!field_or<bool>(cfg, "apply_residual_connection_post_layernorm", false, source), source,
            "apply_residual_connection_post_layernorm=true");
  }
  restore_extension(cfg, c, source);
  check_model_config(c);
  return c;
}

TensorMap read_hf_tensors(const std::string& dir, Arch arch) {
  const HfNameTable& table = hf_names(arch);
  const TensorMap raw = read_safetensors_dir(dir);
  TensorMap out;
  std::set<std::string> used;
  // Keys under the base-model prefix first, so they win over an unprefixed copy;
  // hub files without the prefix name the same base-model tensors.
  for (const bool under_prefix : {true, false}) {
    for (const auto& [key, t] : raw) {
      if (key.starts_with(table.prefix) != under_prefix) continue;
      const std::string name = under_prefix ? key.substr(table.prefix.size()) : key;
      for (const auto& row : table.tensors) {
        if (under_prefix && !row.prefixed) continue;  // e.g. gpt_neox's embed_out
        const auto ours = rename_slot(row.hf, row.ours, name);
        if (!ours) continue;
        if (!out.count(*ours)) {
          const auto value = t.to(at::kFloat);
          out[*ours] = row.transpose ? value.t().contiguous() : value;
          used.insert(key);
        }
        break;
      }
    }
  }
  for (const auto& [key, t] : raw)
    if (!used.count(key) && !ignored(table, key)) log::warn(dir, ": ignoring unexpected tensor ", key);
  return out;
}

void export_hf(const TransformerLM& model, const std::string& dir, const HfExportOptions& options) {
  const ModelConfig& c = model->config();
  const auto method = c.extension.method;
  json cfg;
  bool reproduces = true;
  std::string note;
  const int64_t vocab = vocab_size_of(c);
  switch (c.arch) {
    case Arch::gpt2:
      cfg = {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"vocab_size", vocab},
             {"n_positions", model->wpe->weight.size(0)}, {"n_ctx", model->wpe->weight.size(0)},
             {"n_embd", c.d_model}, {"n_layer", c.n_layers}, {"n_head", c.n_heads}, {"n_inner", d_ff_of(c)},
             {"activation_function", "gelu_new"}, {"layer_norm_epsilon", c.layer_norm_eps},
             {"resid_pdrop", 0.0}, {"embd_pdrop", 0.0}, {"attn_pdrop", 0.0}, {"tie_word_embeddings", true}};
      if (method == ExtensionMethod::interpolate) note = "position table interpolated to n_positions rows (seed 004)";
      break;
    case Arch::gpt_neox: {
      const RopeExport rope = rope_export(c, c.rope.rotary_pct);
      note = rope.note;
      cfg = {{"architectures", {"GPTNeoXForCausalLM"}}, {"model_type", "gpt_neox"}, {"vocab_size", vocab},
             {"hidden_size", c.d_model}, {"num_hidden_layers", c.n_layers}, {"num_attention_heads", c.n_heads},
             {"intermediate_size", d_ff_of(c)}, {"hidden_act", "gelu"}, {"max_position_embeddings", rope.max_positions},
             {"layer_norm_eps", c.layer_norm_eps}, {"use_parallel_residual", true}, {"tie_word_embeddings", false},
             {"attention_bias", true}, {"hidden_dropout", 0.0}, {"attention_dropout", 0.0},
             {"rope_scaling", rope.scaling}, {"rope_parameters", rope.parameters}, {"rotary_pct", c.rope.rotary_pct},
             {"partial_rotary_factor", c.rope.rotary_pct}, {"rotary_emb_base", rope.theta}, {"rope_theta", rope.theta}};
      if (rope.original_length) cfg["original_max_position_embeddings"] = *rope.original_length;
      break;
    }
    case Arch::llama:
      cfg = llama_export(c, note);
      break;
    case Arch::bloom:
      if (d_ff_of(c) != 4 * c.d_model)
        throw InputError("export: BLOOM's MLP width is fixed at 4 * hidden_size; model.d_ff is " +
                         std::to_string(d_ff_of(c)));
      cfg = {{"architectures", {"BloomForCausalLM"}}, {"model_type", "bloom"}, {"vocab_size", vocab},
             {"hidden_size", c.d_model}, {"n_layer", c.n_layers}, {"n_head", c.n_heads},
             {"layer_norm_epsilon", c.layer_norm_eps}, {"apply_residual_connection_post_layernorm", false},
             {"hidden_dropout", 0.0}, {"attention_dropout", 0.0}, {"pretraining_tp", 1}, {"slow_but_exact", false},
             {"tie_word_embeddings", true}, {"seq_length", max_positions_of(c)}};
      if (method != ExtensionMethod::none) {
        reproduces = false;
        note = "transformers' BLOOM uses fixed ALiBi slopes and ignores position ids; load with segtrain to apply " +
               std::string(enum_name(kExtensionMethods, method));
      }
      break;
  }
  // Extended with no scaling (positions past the base's table, trained at L_e): max_position_embeddings
  // says the length the run trained for, not the base's, or serving engines cap the context there.
  if (method == ExtensionMethod::none && cfg.contains("max_position_embeddings") &&
      options.trained_length > cfg["max_position_embeddings"].get<int64_t>())
    cfg["max_position_embeddings"] = options.trained_length;
  json ext = {{"method", enum_name(kExtensionMethods, method)},
              {"factor", method == ExtensionMethod::none ? json(nullptr) : json(factor_of(c))},
              {"original_length", original_length_of(c)}};
  if (method == ExtensionMethod::yarn)
    ext["yarn"] = {{"beta_fast", c.extension.yarn.beta_fast}, {"beta_slow", c.extension.yarn.beta_slow}};
  cfg["segtrain"] = {{"arch", enum_name(kArchs, c.arch)}, {"max_positions", max_positions_of(c)},
                     {"extension", ext}, {"transformers_reproduces", reproduces}};
  if (!note.empty()) cfg["segtrain"]["note"] = note;
  if (options.dtype != at::kFloat && options.dtype != at::kBFloat16)
    throw InputError("export: weights are written as float32 or bfloat16");
  const std::string dtype = options.dtype == at::kFloat ? "float32" : "bfloat16";
  cfg["torch_dtype"] = dtype;  // transformers 4.x
  cfg["dtype"] = dtype;        // transformers 5.x

  TensorMap tensors;
  const HfNameTable& table = hf_names(c.arch);
  for (const auto& [ours, t] : model->tensors()) {
    const auto [row, key] = hf_key(table, ours);
    auto value = t.to(at::kCPU, options.dtype);
    tensors[key] = row->transpose ? value.t().contiguous() : value;
  }
  fs::create_directories(dir);
  write_safetensors_dir(dir, tensors, options.max_shard_bytes);
  write_file_atomic(fs::path(dir) / "config.json", cfg.dump(2) + "\n");
}

}  // namespace segtrain::models
