#include "models/spec/families/hf_config.h"

#include <filesystem>
#include <utility>

#include "common/enum_names.h"
#include "common/error.h"
#include "common/file_io.h"
#include "models/spec/config_rules.h"
#include "models/spec/families/hf_config_fields.h"

namespace segtrain::models {

namespace {

using json = nlohmann::json;
using hf::field;

// What an HF "segtrain" field recorded, to restore methods transformers cannot express.
void restore_extension(const json& cfg, ModelConfig& c, const std::string& source) {
  if (!cfg.contains("segtrain") || !cfg["segtrain"].is_object()) return;
  const auto& s = cfg["segtrain"];
  // Checked like every other field: nlohmann's value() throws its own type_error on a non-boolean (fuzz_hf_config).
  if (hf::field_or<bool>(s, "transformers_reproduces", true, source + " segtrain") || !s.contains("extension")) return;
  const auto& e = s["extension"];
  auto method = enum_from_name(kExtensionMethods, field<std::string>(e, "method", source));
  if (!method) throw InputError(source + ": unknown segtrain.extension.method " + e["method"].dump());
  c.extension.method = *method;
  if (e.contains("factor") && !e["factor"].is_null()) c.extension.factor = field<double>(e, "factor", source);
  if (e.contains("original_length") && !e["original_length"].is_null())
    c.extension.original_length = field<int64_t>(e, "original_length", source);
}

}  // namespace

HfConfigJson read_hf_config_json(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  const std::string text = read_file(path, "HF config");
  json cfg;
  try {
    cfg = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(path + ": not valid JSON (" + e.what() + ")");
  }
  if (!cfg.is_object() || !cfg.contains("model_type") || !cfg.at("model_type").is_string())
    throw InputError(path + ": not a transformers config.json (expected a JSON object with a string \"model_type\")");
  const Family& family = family_for_model_type(cfg.at("model_type").get<std::string>(), path);
  return {path, std::move(cfg), &family};
}

ModelConfig read_hf_config(const std::string& dir) {
  const HfConfigJson file = read_hf_config_json(dir);
  ModelConfig c = file.family->read_config(file.json, file.path);
  c.hf_model_type = file.family->model_type();
  restore_extension(file.json, c, file.path);
  check_model_config(c);
  return c;
}

}  // namespace segtrain::models
