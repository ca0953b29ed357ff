#include "models/modules/model_io.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <type_traits>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/log.h"
#include "models/modules/converters/converter.h"
#include "models/modules/hf.h"
#include "models/modules/safetensors.h"
#include "models/modules/weight_init.h"
#include "models/spec/base_record.h"
#include "models/spec/families/hf_config.h"

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

template <class T>
void get_opt(const json& j, const char* key, std::optional<T>& out) {
  if (j.contains(key)) out = j[key].is_null() ? std::nullopt : std::optional<T>(value_of<T>(j, key));
}

template <class T>
void get(const json& j, const char* key, T& out) {
  if (j.contains(key)) out = value_of<T>(j, key);
}

}  // namespace

std::optional<ModelFormat> detect_model_format(const std::string& dir, std::string* resolved) {
  fs::path p(dir);
  if (!fs::exists(p / "model_config.json") && !fs::exists(p / "config.json") &&
      fs::exists(p / "final" / "model_config.json"))
    p /= "final";  // a run directory
  if (resolved) *resolved = p.string();
  if (fs::exists(p / "model_config.json")) return ModelFormat::segtrain;
  if (fs::exists(p / "config.json")) return ModelFormat::hf;
  return std::nullopt;
}

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
            {"activation_checkpointing", c.activation_checkpointing}};
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
    get(j, "activation_checkpointing", c.activation_checkpointing);
  } catch (const json::exception& e) {
    throw InputError(source + ": not a valid model_config.json (" + e.what() + ")");
  }
  return c;
}

ModelConfig read_model_config(const std::string& dir) {
  std::string resolved;
  const auto format = detect_model_format(dir, &resolved);
  if (!format)
    throw InputError(dir + ": not a model directory (expected model_config.json + model.safetensors from segtrain, "
                           "or config.json + safetensors from transformers)");
  if (*format == ModelFormat::hf) return read_hf_config(resolved);
  const fs::path path = fs::path(resolved) / "model_config.json";
  return model_config_from_json(read_file(path, "model config"), path.string());
}

namespace {

// A load_model inside another (a converted run's base, read by converted_tensors) says nothing of
// its own: the outer one names both.
thread_local int loads_in_progress = 0;

std::string mib_text(double bytes) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << bytes / (1024.0 * 1024.0) << " MiB";
  return out.str();
}

// The bytes of a folder's weight files (*.safetensors), what loading it reads.
double weight_bytes(const fs::path& dir) {
  double bytes = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().extension() == ".safetensors" && entry.is_regular_file(ec))
      bytes += static_cast<double>(entry.file_size(ec));
  return bytes;
}

// What load_model reads, in words: "the Hugging Face folder DIR (513.0 MiB of weights)", or a
// run's model and the base its base.json names.
std::string loaded_text(const std::string& dir, std::optional<ModelFormat> format) {
  const std::string own = mib_text(weight_bytes(dir));
  if (format == ModelFormat::hf) return "the Hugging Face folder " + dir + " (" + own + " of weights)";
  const fs::path record = fs::path(dir) / kBaseFile;
  if (fs::is_regular_file(record)) {
    try {
      const BaseRecord base = base_record_from_json(read_file(record, "base record"), record.string());
      return "the segtrain model " + dir + " (" + own + " that trained, on its base " + base.folder + ", " +
             mib_text(weight_bytes(base.folder)) + ")";
    } catch (const std::exception&) {  // loading it below says what is wrong
    }
  }
  return "the segtrain model " + dir + " (" + own + " of weights)";
}

// This process's peak resident memory in MiB (/proc/self/status's VmHWM), 0 where unknown.
double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;  // "VmHWM:  1234 kB"
  return 0;
}

}  // namespace

TransformerLM load_model(const std::string& dir, const std::optional<ModelConfig>& config, WeightDtype dtype,
                         bool say_time) {
  std::string resolved;
  const auto format = detect_model_format(dir, &resolved);
  const ModelConfig c = config ? *config : read_model_config(dir);
  // Loading a model of hundreds of MiB takes seconds: what is read, from where, and how long it took.
  struct Said {
    bool outermost = loads_in_progress++ == 0;
    std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
    ~Said() { --loads_in_progress; }
  } said;
  if (said.outermost && format) log::info("loading ", loaded_text(resolved, format));
  TransformerLM model = [&] {
    const SkipWeightInit skip;  // every weight comes from the files
    return TransformerLM(c);
  }();
  if (format == ModelFormat::hf) {
    auto tensors = hf_tensor_sources(resolved);
    if (c.tie_embeddings) tensors.erase("lm_head.weight");  // a saved copy of the tied head
    model->load_tensors(tensors, resolved, /*strict=*/true, dtype);
  } else if (!fs::exists(fs::path(resolved) / kConvertersFile) && !fs::exists(fs::path(resolved) / kBaseFile)) {
    model->load_tensors(open_safetensors_dir(resolved), resolved, /*strict=*/true, dtype);
  } else {
    // A converted model's directory (a run's final/) holds what its converters made: folded back.
    model->load_tensors(sources_of(fold_converters(read_converters(resolved), converted_tensors(resolved, c))),
                        resolved, /*strict=*/true, dtype);
  }
  if (said.outermost && say_time)
    log::info("loaded ", resolved, " in ", std::fixed, std::setprecision(1),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - said.started).count(),
              " s, peak host memory ", peak_rss_mib(), " MiB");
  return model;
}

std::map<std::string, at::Tensor> converted_tensors(const std::string& dir, const ModelConfig& config) {
  auto saved = read_safetensors_dir(dir);
  const auto base = read_base_record(dir);
  if (!base) return saved;
  auto tensors = load_model(base->folder, config)->tensors();
  for (auto& [name, t] : saved) tensors[name] = std::move(t);
  return tensors;
}

void save_model_dir(const TransformerLM& model, const std::string& dir) {
  save_model_dir(model->config(), model->tensors(), dir);
}

void save_model_dir(const ModelConfig& config, const std::map<std::string, at::Tensor>& tensors,
                    const std::string& dir) {
  fs::create_directories(dir);
  write_safetensors_dir(dir, tensors);
  write_file_atomic(fs::path(dir) / "model_config.json", model_config_to_json(config));
}

}  // namespace segtrain::models
