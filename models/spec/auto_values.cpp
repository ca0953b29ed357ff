#include "models/spec/auto_values.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"

namespace segtrain::models {

int64_t vocab_size_of(const ModelConfig& c) {
  if (!c.vocab_size) throw InputError("model.vocab_size is auto but was not resolved before building the model");
  return *c.vocab_size;
}

int64_t max_positions_of(const ModelConfig& c) {
  if (!c.max_positions) throw InputError("model.max_positions is auto but was not resolved before building the model");
  return *c.max_positions;
}

int64_t d_ff_of(const ModelConfig& c) { return c.d_ff.value_or(4 * c.d_model); }

int64_t original_length_of(const ModelConfig& c) {
  return c.extension.original_length ? *c.extension.original_length : max_positions_of(c);
}

double auto_extension_factor(int64_t target_length, int64_t original_length) {
  return std::max(kMinExtensionFactor, static_cast<double>(target_length) / static_cast<double>(original_length));
}

double factor_of(const ModelConfig& c) {
  if (c.extension.method == ExtensionMethod::none) return 1.0;
  if (!c.extension.factor)
    throw InputError("model.extension.factor is auto but was not resolved (method " +
                     std::string(enum_name(kExtensionMethods, c.extension.method)) + " needs a number)");
  return *c.extension.factor;
}

int64_t head_dim_of(const ModelConfig& c) { return c.head_dim.value_or(c.d_model / c.n_heads); }

int64_t n_kv_heads_of(const ModelConfig& c) { return c.n_kv_heads.value_or(c.n_heads); }

int64_t rotary_dim_of(const ModelConfig& c) {
  return static_cast<int64_t>(static_cast<double>(head_dim_of(c)) * c.rope.rotary_pct);
}

double ntk_base(const ModelConfig& c) {
  const double d = static_cast<double>(rotary_dim_of(c));
  return c.rope.theta * std::pow(factor_of(c), d / (d - 2));
}

int64_t ape_rows(const ModelConfig& c) {
  if (c.extension.method != ExtensionMethod::interpolate) return max_positions_of(c);
  return static_cast<int64_t>(std::llround(factor_of(c) * static_cast<double>(original_length_of(c))));
}

bool positions_depend_on_length(const ModelConfig& c) {
  const auto m = c.extension.method;
  return m == ExtensionMethod::dynamic_ntk || m == ExtensionMethod::dynamic_interpolate ||
         m == ExtensionMethod::longrope;
}

}  // namespace segtrain::models
