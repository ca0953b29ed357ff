#include "models/modules/model_io.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

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

std::optional<ModelFormat> detect_model_format(const std::string& dir, std::string* resolved) {
  const fs::path p = segtrain_model_folder(dir);
  if (resolved) *resolved = p.string();
  if (fs::exists(p / kModelConfigFile)) return ModelFormat::segtrain;
  if (fs::exists(p / "config.json")) return ModelFormat::hf;
  return std::nullopt;
}

ModelConfig read_model_config(const std::string& dir) {
  std::string resolved;
  const auto format = detect_model_format(dir, &resolved);
  if (!format)
    throw InputError(dir + ": not a model directory (expected model_config.json + model.safetensors from segtrain, "
                           "or config.json + safetensors from transformers)");
  return *format == ModelFormat::hf ? read_hf_config(resolved) : read_segtrain_model_config(resolved);
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
  write_file_atomic(fs::path(dir) / kModelConfigFile, model_config_to_json(config));
}

}  // namespace segtrain::models
