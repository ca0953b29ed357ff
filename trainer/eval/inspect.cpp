#include "trainer/eval/inspect.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <optional>

#include "common/error.h"
#include "models/modules/model_io.h"
#include "models/modules/positions.h"
#include "models/spec/config_rules.h"
#include "trainer/config/config.h"
#include "trainer/config/model_ref.h"
#include "trainer/config/resolved_model.h"

namespace segtrain::trainer {

namespace {

using json = nlohmann::json;

std::vector<double> to_vector(const at::Tensor& t) {
  auto c = t.to(at::kDouble).contiguous();
  return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

// A run config's model with the auto values resolved the way the trainer does
// (config/resolved_model.h): lengths from data.*, the architecture from
// model.init's folder when it has one. The store need not exist yet.
models::ModelConfig run_config_model(const std::string& file, const std::vector<std::string>& overrides,
                                     std::optional<std::string>& weights) {
  auto loaded = parse_config_file(file);
  for (const auto& a : overrides) apply_override(loaded, a);
  std::optional<models::ModelConfig> base;
  if (const std::string dir = model_ref_dir(loaded.config.model.init); !dir.empty()) {
    base = models::read_model_config(dir);
    weights = dir;
  }
  // The store may not exist yet: a scratch model's vocabulary stands at 1 (positions do not depend on it).
  return resolve_model_config(loaded, base, /*store_vocab_size=*/1);
}

}  // namespace

std::string positions_json(const InspectPositionsOptions& o) {
  if (o.model.empty() == o.config.empty()) throw InputError("give exactly one of --model PATH or --config CONFIG");
  models::ModelConfig spec;
  std::optional<std::string> weights;
  if (!o.model.empty()) {
    spec = apply_model_overrides(models::read_model_config(o.model), o.overrides);
    weights = o.model;
  } else {
    spec = run_config_model(o.config, o.overrides, weights);
  }
  models::check_model_config(spec);
  const auto scheme = models::position_scheme(spec.arch);
  const int64_t lt = models::original_length_of(spec);
  const double factor = models::factor_of(spec);
  const int64_t extended = static_cast<int64_t>(std::llround(factor * static_cast<double>(lt)));
  int64_t length = o.length;
  if (length == 0)
    length = scheme == models::PositionScheme::learned ? models::ape_rows(spec)
         : spec.extension.method == models::ExtensionMethod::none ? *spec.max_positions
                                                                  : extended;

  json out = {{"arch", enum_name(models::kArchs, spec.arch)},
              {"length", length},
              {"extension",
               {{"method", enum_name(models::kExtensionMethods, spec.extension.method)},
                {"factor", spec.extension.method == models::ExtensionMethod::none ? json(nullptr) : json(factor)},
                {"original_length", lt}}}};
  if (scheme == models::PositionScheme::learned) {
    const int64_t rows = models::ape_rows(spec);
    out["scheme"] = "learned";
    out["table_rows"] = rows;
    if (length > rows)
      throw InputError("--length " + std::to_string(length) + " is beyond the position table (" +
                       std::to_string(rows) + " rows); set model.extension.method=interpolate with a factor");
    const int64_t from = spec.extension.method == models::ExtensionMethod::interpolate ? lt : rows;
    out["source_positions"] = to_vector(models::ape_source_positions(from, rows).slice(0, 0, length));
    if (weights) {
      auto model = models::load_model(*weights, spec);
      const auto table = model->wpe->weight.detach().slice(0, 0, length);
      json rows_json = json::array();
      for (int64_t i = 0; i < length; ++i) rows_json.push_back(to_vector(table[i]));
      out["rows"] = rows_json;
    }
  } else if (scheme == models::PositionScheme::rope) {
    const auto rope = models::rope_params(spec, length);
    out["scheme"] = "rope";
    out["rotary_dim"] = models::rotary_dim_of(spec);
    out["base"] = rope.base;
    out["inv_freq"] = to_vector(rope.inv_freq);
    out["attention_scale"] = rope.attention_scale;
    const auto& ext = spec.extension;
    if (ext.method == models::ExtensionMethod::llama3)
      out["extension"]["llama3"] = {{"low_freq_factor", ext.llama3.low_freq_factor},
                                    {"high_freq_factor", ext.llama3.high_freq_factor}};
    if (ext.method == models::ExtensionMethod::longrope)  // transformers switches lists past the original length
      out["extension"]["longrope"] = {{"factors_in_effect", length > lt ? "long_factor" : "short_factor"}};
  } else {
    out["scheme"] = "alibi";
    out["slopes"] = to_vector(models::alibi_slopes_for(spec, length));
  }
  return out.dump(2) + "\n";
}

// The bias is computed as BLOOM does (fp32 slope times position) and then cast,
// which is what a 16-bit model would see.
std::string alibi_precision_json(const AlibiPrecisionOptions& o) {
  if (o.head && *o.head >= o.heads)
    throw InputError("--head " + std::to_string(*o.head) + " is out of range for --heads " + std::to_string(o.heads));
  const auto slopes = models::alibi_slopes(o.heads);
  const auto positions = at::arange(o.length, at::kLong);
  nlohmann::json heads = nlohmann::json::array();
  for (int64_t h = 0; h < o.heads; ++h) {
    if (o.head && *o.head != h) continue;
    const auto bias = slopes[h] * positions;  // fp32
    nlohmann::json buckets = nlohmann::json::array();
    for (int64_t start = 0; start < o.length; start += o.bucket) {
      const int64_t end = std::min(start + o.bucket, o.length);
      const auto part = bias.slice(0, start, end);
      auto distinct = [&](at::ScalarType t) { return std::get<0>(at::_unique(part.to(t))).numel(); };
      buckets.push_back({{"start", start}, {"end", end}, {"fp32", distinct(at::kFloat)},
                         {"fp16", distinct(at::kHalf)}, {"bf16", distinct(at::kBFloat16)}});
    }
    heads.push_back({{"head", h}, {"slope", slopes[h].item<double>()}, {"buckets", buckets}});
  }
  nlohmann::json out = {{"heads", o.heads}, {"length", o.length}, {"bucket", o.bucket}, {"per_head", heads}};
  return out.dump(2) + "\n";
}

}  // namespace segtrain::trainer
