// Positional parameters in effect at a length: ALiBi slopes, RoPE inverse
// frequencies and attention scale, or the rows of the (interpolated) APE table.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <iostream>
#include <optional>

#include "common/error.h"
#include "models/model_io.h"
#include "models/positions.h"
#include "trainer/commands.h"
#include "trainer/config.h"
#include "trainer/model_overrides.h"

namespace segtrain::trainer {

namespace {

using json = nlohmann::json;

std::vector<double> to_vector(const at::Tensor& t) {
  auto c = t.to(at::kDouble).contiguous();
  return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

// A run config's model with the auto values resolved the way the trainer does:
// lengths from data.*, the architecture from model.init's folder when it has one.
models::ModelConfig resolve_run_model(const Config& cfg, std::optional<std::string>& weights) {
  models::ModelConfig spec = cfg.model.spec;
  const auto& init = cfg.model.init;
  for (const std::string prefix : {"hf:", "checkpoint:"})
    if (init.rfind(prefix, 0) == 0) {
      weights = init.substr(prefix.size());
      auto stored = models::read_model_config(*weights);
      stored.extension = spec.extension;
      stored.rope.theta = spec.rope.theta;
      spec = stored;
    }
  const int64_t lt = cfg.data.train_length, le = cfg.data.extended_length;
  if (!spec.max_positions) spec.max_positions = lt;
  if (!spec.extension.original_length) spec.extension.original_length = lt;
  if (!spec.extension.factor) spec.extension.factor = static_cast<double>(le) / static_cast<double>(lt);
  if (!spec.vocab_size) spec.vocab_size = 1;  // positions do not depend on it
  return spec;
}

}  // namespace

int cmd_inspect_positions(const InspectPositionsOptions& o) {
  models::ModelConfig spec;
  std::optional<std::string> weights;
  if (!o.model.empty()) {
    spec = apply_model_overrides(models::read_model_config(o.model), o.overrides);
    weights = o.model;
  } else {
    auto loaded = parse_config_file(o.config);
    for (const auto& a : o.overrides) apply_override(loaded, a);
    spec = resolve_run_model(loaded.config, weights);
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
  } else {
    out["scheme"] = "alibi";
    out["slopes"] = to_vector(models::alibi_slopes_for(spec, length));
  }
  std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace segtrain::trainer
