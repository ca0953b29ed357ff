#include "models/spec/config_rules.h"

#include <cmath>
#include <string>

#include "common/numbers.h"
#include "models/spec/auto_values.h"

namespace segtrain::models {
namespace {

void fail(std::vector<ConfigProblem>& out, const char* key, std::string message) {
  out.push_back({key, std::move(message)});
}
std::string n(int64_t v) { return std::to_string(v); }

std::string archs_with_block(BlockKind block) {
  std::string out;
  for (const auto& layout : kArchLayouts)
    if (layout.block == block) out += (out.empty() ? "" : "|") + std::string(enum_name(kArchs, layout.arch));
  return out;
}

// Sizes that hold together; the Llama block's keys only on the archs built of it.
void check_sizes(std::vector<ConfigProblem>& out, const ModelConfig& c) {
  if (c.d_model <= 0) fail(out, "model.d_model", "must be positive, got " + n(c.d_model));
  if (c.n_layers <= 0) fail(out, "model.n_layers", "must be positive, got " + n(c.n_layers));
  if (c.n_heads <= 0) {
    fail(out, "model.n_heads", "must be positive, got " + n(c.n_heads));
    return;  // the rules below divide by it
  }
  // Bounded like HF hidden sizes so shapes and the rotary width cannot overflow.
  if (c.head_dim && (*c.head_dim <= 0 || *c.head_dim > (int64_t{1} << 40)))
    fail(out, "model.head_dim", "must be in [1, 2^40], got " + n(*c.head_dim));
  if (!c.head_dim && c.d_model % c.n_heads != 0)
    fail(out, "model.n_heads", "d_model = " + n(c.d_model) + " is not divisible by n_heads = " + n(c.n_heads));
  if (c.n_kv_heads && (*c.n_kv_heads <= 0 || c.n_heads % *c.n_kv_heads != 0))
    fail(out, "model.n_kv_heads", "n_heads = " + n(c.n_heads) + " is not divisible by n_kv_heads = " + n(*c.n_kv_heads));
  if (c.sliding_window && *c.sliding_window <= 0)
    fail(out, "model.sliding_window", "must be positive, got " + n(*c.sliding_window));
  const ArchLayout& layout = arch_layout(c.arch);
  if (layout.positions == PositionScheme::rope && !layout.partial_rotary && c.rope.rotary_pct != 1.0)
    fail(out, "model.rope.rotary_pct", std::string("model.arch ") + enum_name(kArchs, c.arch) +
                                           " rotates the whole head (transformers' Llama, Mistral, Qwen2, Qwen3 and "
                                           "Phi-3 do); use 1");
  if (layout.block == BlockKind::llama) return;
  // Their defaults (auto, false) are what Megatron blocks do; a value that asks for
  // more is refused rather than ignored.
  const std::string llama_only = "applies to model.arch " + archs_with_block(BlockKind::llama) + " only, not " +
                                 enum_name(kArchs, c.arch);
  const std::pair<const char*, bool> asked[] = {
      {"model.n_kv_heads", c.n_kv_heads.has_value()}, {"model.head_dim", c.head_dim.has_value()},
      {"model.qkv_bias", c.qkv_bias},                 {"model.o_bias", c.o_bias},
      {"model.mlp_bias", c.mlp_bias},                 {"model.tie_embeddings", c.tie_embeddings},
      {"model.qk_norm", c.qk_norm},
      {"model.sliding_window", c.sliding_window.has_value()}};
  for (const auto& [key, set] : asked)
    if (set) fail(out, key, llama_only);
}

void check_rotary(std::vector<ConfigProblem>& out, const ModelConfig& c, Sizes sizes) {
  const auto m = c.extension.method;
  if (sizes == Sizes::known) {
    const int64_t rd = rotary_dim_of(c);
    if (rd < 2 || rd % 2 != 0) {
      fail(out, "model.rope.rotary_pct", "int(head_dim * rotary_pct) = " + n(rd) +
                                             " rotated dimensions per head; that must be an even number >= 2");
      return;
    }
    if ((m == ExtensionMethod::ntk || m == ExtensionMethod::dynamic_ntk) && rd <= 2)
      fail(out, "model.extension.method", "NTK scaling needs more than 2 rotary dimensions (its exponent is d/(d-2))");
  }
  if (m == ExtensionMethod::llama3) {
    const auto& l3 = c.extension.llama3;
    if (!(l3.low_freq_factor > 0) || !(l3.high_freq_factor > l3.low_freq_factor))
      fail(out, "model.extension.llama3.high_freq_factor",
           "need 0 < low_freq_factor < high_freq_factor, got " + format_double(l3.low_freq_factor) + " and " +
               format_double(l3.high_freq_factor));
  }
  if (m == ExtensionMethod::longrope) {
    for (const auto& [key, factors] : {std::pair{"model.extension.longrope.short_factor", &c.extension.longrope.short_factor},
                                       std::pair{"model.extension.longrope.long_factor", &c.extension.longrope.long_factor}}) {
      const int64_t frequencies = sizes == Sizes::known ? rotary_dim_of(c) / 2 : 0;
      if (factors->empty() || (frequencies > 0 && static_cast<int64_t>(factors->size()) != frequencies))
        fail(out, key, "longrope needs one factor per rotary frequency (" +
                           (frequencies > 0 ? n(frequencies) + " = " : std::string()) + "rotary dimensions / 2), got " +
                           n(static_cast<int64_t>(factors->size())));
      for (double f : *factors)
        if (!(f > 0) || !std::isfinite(f)) {
          fail(out, key, "must hold positive numbers, got " + format_double(f));
          break;
        }
    }
  }
}

}  // namespace

bool method_fits(ExtensionMethod m, PositionScheme scheme) {
  using M = ExtensionMethod;
  if (m == M::none || m == M::interpolate) return true;
  switch (scheme) {
    case PositionScheme::rope:
      return m == M::ntk || m == M::dynamic_ntk || m == M::yarn || m == M::llama3 || m == M::longrope;
    case PositionScheme::alibi: return m == M::dynamic_interpolate || m == M::ntk_alibi;
    case PositionScheme::learned: return false;
  }
  return false;
}

std::vector<ConfigProblem> model_problems(const ModelConfig& c, Sizes sizes) {
  std::vector<ConfigProblem> out;
  check_sizes(out, c);
  if (!out.empty()) return out;  // the rules below read the sizes
  const auto method = c.extension.method;
  const auto scheme = position_scheme(c.arch);
  if (!method_fits(method, scheme)) {
    fail(out, "model.extension.method",
         std::string(enum_name(kExtensionMethods, method)) + " does not apply to model.arch " +
             enum_name(kArchs, c.arch) +
             " (learned: interpolate; rope: interpolate|ntk|dynamic_ntk|yarn|llama3|longrope; "
             "alibi: interpolate|dynamic_interpolate|ntk_alibi)");
    return out;
  }
  if (method != ExtensionMethod::none && c.extension.factor && !(*c.extension.factor >= kMinExtensionFactor))
    fail(out, "model.extension.factor", format_double(*c.extension.factor) +
                                            " would shrink the trained positions; it must be >= " +
                                            format_double(kMinExtensionFactor));
  if (scheme == PositionScheme::rope) check_rotary(out, c, sizes);
  return out;
}

void check_model_config(const ModelConfig& c) {
  throw_first(model_problems(c));
  vocab_size_of(c);
  max_positions_of(c);
  factor_of(c);
}

}  // namespace segtrain::models
