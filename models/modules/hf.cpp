#include "models/modules/hf.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/log.h"
#include "models/spec/auto_values.h"
#include "models/spec/families/family.h"
#include "models/spec/families/hf_config.h"

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

// The one-to-one row naming HF tensor `name` (without the prefix, found `under_prefix`
// or not): its source goes to `out` under our name unless a prefixed copy came first.
// Whether a row took it.
bool import_row(const HfNameTable& table, const std::string& name, bool under_prefix, const TensorSource& t,
                TensorSources& out) {
  for (const auto& row : table.tensors) {
    if (under_prefix && !row.prefixed) continue;  // e.g. gpt_neox's embed_out
    const auto ours = rename_slot(row.hf, row.ours, name);
    if (!ours) continue;
    if (out.count(*ours)) return false;
    out[*ours] = row.transpose ? TensorSource([t] { return t().t().contiguous(); }) : t;
    return true;
  }
  return false;
}

// The fused row naming HF tensor `name`: split along its dim into our parts, at the
// sizes the folder's config `c` gives (InputError naming `key`, when read, if they do
// not add up to the tensor's). Each part reads the fused tensor when it is loaded.
// Whether a row took it.
bool import_fused(const HfNameTable& table, const std::string& name, bool under_prefix, const TensorSource& t,
                  const ModelConfig& c, const std::string& key, TensorSources& out) {
  for (const auto& row : table.fused) {
    if (under_prefix && !row.prefixed) continue;
    std::vector<std::string> ours;
    for (const auto& part : row.parts)
      if (auto mine = rename_slot(row.hf, part, name)) ours.push_back(*mine);
    if (ours.size() != row.parts.size()) continue;
    if (out.count(ours.front())) return false;
    const std::vector<int64_t> sizes = row.sizes(c);
    for (size_t i = 0; i < ours.size(); ++i)
      out[ours[i]] = [t, sizes, dim = row.dim, key, i] {
        const at::Tensor fused = t();
        int64_t total = 0;
        for (const int64_t size : sizes) total += size;
        if (fused.dim() <= dim || fused.size(dim) != total)
          throw InputError(key + ": expected " + std::to_string(total) + " rows along dimension " +
                           std::to_string(dim) + " (its parts as config.json sizes them), got shape " +
                           c10::str(fused.sizes()));
        return fused.split_with_sizes(sizes, dim)[i].contiguous();
      };
    return true;
  }
  return false;
}

// Our parameter `ours` as a part of a fused HF tensor: the row, the fused tensor's
// full key and the part's index; nullopt when no fused row has it.
struct FusedPart {
  const HfFusedTensor* row;
  std::string key;
  size_t index;
};
std::optional<FusedPart> fused_part(const HfNameTable& table, const std::string& ours) {
  for (const auto& row : table.fused)
    for (size_t i = 0; i < row.parts.size(); ++i)
      if (auto hf = rename_slot(row.parts[i], row.hf, ours))
        return FusedPart{&row, (row.prefixed ? table.prefix : "") + *hf, i};
  return std::nullopt;
}

// The model's tensors under transformers' names, in `dtype`: renamed by the table's
// rows, and fused ones concatenated from their parts in order.
TensorMap hf_tensors(const TransformerLM& model, const HfNameTable& table, at::ScalarType dtype) {
  TensorMap tensors;
  std::map<std::string, std::pair<const HfFusedTensor*, std::vector<at::Tensor>>> fused;  // key -> row, parts
  for (const auto& [ours, t] : model->tensors()) {
    auto value = t.to(at::kCPU, dtype);
    if (const auto part = fused_part(table, ours)) {
      auto& [row, slots] = fused[part->key];
      row = part->row;
      slots.resize(row->parts.size());
      slots[part->index] = value;
      continue;
    }
    const auto [row, key] = hf_key(table, ours);
    tensors[key] = row->transpose ? value.t().contiguous() : value;
  }
  for (const auto& [key, entry] : fused) {
    for (const auto& slot : entry.second)
      if (!slot.defined()) throw std::logic_error("export: a part of fused tensor " + key + " is missing");
    tensors[key] = at::cat(entry.second, entry.first->dim);
  }
  return tensors;
}

}  // namespace

TensorSources hf_tensor_sources(const std::string& dir) {
  const HfConfigJson config = read_hf_config_json(dir);
  const HfNameTable& table = config.family->names();
  // Only a table with fused tensors needs the sizes to split them at.
  const std::optional<ModelConfig> sizes =
      table.fused.empty() ? std::nullopt : std::optional(config.family->read_config(config.json, config.path));
  const TensorSources raw = open_safetensors_dir(dir);
  TensorSources out;
  std::set<std::string> used;
  // Keys under the base-model prefix first, so they win over an unprefixed copy;
  // hub files without the prefix name the same base-model tensors.
  for (const bool under_prefix : {true, false}) {
    for (const auto& [key, t] : raw) {
      if (key.starts_with(table.prefix) != under_prefix) continue;
      const std::string name = under_prefix ? key.substr(table.prefix.size()) : key;
      if (import_row(table, name, under_prefix, t, out) ||
          (sizes && import_fused(table, name, under_prefix, t, *sizes, key, out)))
        used.insert(key);
    }
  }
  for (const auto& [key, t] : raw)
    if (!used.count(key) && !ignored(table, key)) log::warn(dir, ": ignoring unexpected tensor ", key);
  return out;
}

TensorMap read_hf_tensors(const std::string& dir) {
  TensorMap out;
  for (const auto& [name, read] : hf_tensor_sources(dir)) out[name] = read().to(at::kFloat);
  return out;
}

HfExported export_hf(const TransformerLM& model, const std::string& dir, const HfExportOptions& options) {
  const ModelConfig& c = model->config();
  const auto method = c.extension.method;
  const Family& family = family_for_export(c);
  HfConfigOut out = family.write_config(c);
  json& cfg = out.config;
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
                     {"extension", ext}, {"transformers_reproduces", out.transformers_reproduces}};
  if (!out.note.empty()) cfg["segtrain"]["note"] = out.note;
  if (options.dtype != at::kFloat && options.dtype != at::kBFloat16)
    throw InputError("export: weights are written as float32 or bfloat16");
  const std::string dtype = options.dtype == at::kFloat ? "float32" : "bfloat16";
  cfg["torch_dtype"] = dtype;  // transformers 4.x
  cfg["dtype"] = dtype;        // transformers 5.x

  const TensorMap tensors = hf_tensors(model, family.names(), options.dtype);
  fs::create_directories(dir);
  write_safetensors_dir(dir, tensors, options.max_shard_bytes);
  write_file_atomic(fs::path(dir) / "config.json", cfg.dump(2) + "\n");
  return {out.transformers_reproduces, out.note};
}

}  // namespace segtrain::models
