#include "models/positions.h"

#include <cmath>
#include <numbers>
#include <string>

#include "common/error.h"

namespace segtrain::models {

namespace {

std::string method_name(ExtensionMethod m) { return enum_name(kExtensionMethods, m); }

// The Llama-family keys: sizes that hold together, and only on llama.
void check_llama_keys(const ModelConfig& c) {
  const auto n = [](int64_t v) { return std::to_string(v); };
  // Bounded like HF hidden sizes so shapes and the rotary width cannot overflow.
  if (c.head_dim && (*c.head_dim <= 0 || *c.head_dim > (int64_t{1} << 40)))
    throw InputError("model.head_dim must be in [1, 2^40], got " + n(*c.head_dim));
  if (c.n_kv_heads && (*c.n_kv_heads <= 0 || c.n_heads % *c.n_kv_heads != 0))
    throw InputError("model.n_kv_heads (" + n(*c.n_kv_heads) + ") must divide model.n_heads (" + n(c.n_heads) + ")");
  if (c.sliding_window && *c.sliding_window <= 0) throw InputError("model.sliding_window must be positive");
  if (c.arch == Arch::llama) {
    if (c.rope.rotary_pct != 1.0)
      throw InputError("model.rope.rotary_pct must be 1 for llama (transformers' Llama, Mistral and Qwen2 rotate "
                       "the whole head)");
    return;
  }
  const std::string arch = " applies to model.arch llama only, not " + std::string(enum_name(kArchs, c.arch));
  if (c.n_kv_heads && *c.n_kv_heads != c.n_heads) throw InputError("model.n_kv_heads" + arch);
  if (c.head_dim && (c.d_model % *c.head_dim != 0 || c.d_model / *c.head_dim != c.n_heads))
    throw InputError("model.head_dim" + arch);
  if (c.qkv_bias) throw InputError("model.qkv_bias" + arch);
  if (c.o_bias) throw InputError("model.o_bias" + arch);
  if (c.mlp_bias) throw InputError("model.mlp_bias" + arch);
  if (c.tie_embeddings) throw InputError("model.tie_embeddings" + arch);
  if (c.sliding_window) throw InputError("model.sliding_window" + arch);
}

void check_llama3(const Llama3Config& l) {
  if (!(l.low_freq_factor > 0) || !(l.high_freq_factor > l.low_freq_factor))
    throw InputError("model.extension.llama3: need 0 < low_freq_factor < high_freq_factor, got " +
                     std::to_string(l.low_freq_factor) + " and " + std::to_string(l.high_freq_factor));
}

void check_longrope(const LongRopeConfig& l, int64_t frequencies) {
  const auto check = [&](const std::vector<double>& factors, const std::string& key) {
    if (static_cast<int64_t>(factors.size()) != frequencies)
      throw InputError("model.extension.longrope." + key + " needs one factor per rotary frequency (" +
                       std::to_string(frequencies) + " = rotary dimensions / 2), got " +
                       std::to_string(factors.size()));
    for (double f : factors)
      if (!(f > 0) || !std::isfinite(f))
        throw InputError("model.extension.longrope." + key + " must hold positive numbers, got " + std::to_string(f));
  };
  check(l.short_factor, "short_factor");
  check(l.long_factor, "long_factor");
}

}  // namespace

int64_t vocab_size_of(const ModelConfig& c) {
  if (!c.vocab_size) throw InputError("model.vocab_size is auto but was not resolved before building the model");
  return *c.vocab_size;
}

int64_t max_positions_of(const ModelConfig& c) {
  if (!c.max_positions) throw InputError("model.max_positions is auto but was not resolved before building the model");
  return *c.max_positions;
}

int64_t d_ff_of(const ModelConfig& c) { return c.d_ff.value_or(4 * c.d_model); }

bool positions_depend_on_length(const ModelConfig& c) {
  const auto m = c.extension.method;
  return m == ExtensionMethod::dynamic_ntk || m == ExtensionMethod::dynamic_interpolate ||
         m == ExtensionMethod::longrope;
}

int64_t original_length_of(const ModelConfig& c) {
  return c.extension.original_length ? *c.extension.original_length : max_positions_of(c);
}

double factor_of(const ModelConfig& c) {
  if (c.extension.method == ExtensionMethod::none) return 1.0;
  if (!c.extension.factor)
    throw InputError("model.extension.factor is auto but was not resolved (method " +
                     method_name(c.extension.method) + " needs a number)");
  return *c.extension.factor;
}

int64_t head_dim_of(const ModelConfig& c) { return c.head_dim.value_or(c.d_model / c.n_heads); }

int64_t n_kv_heads_of(const ModelConfig& c) { return c.n_kv_heads.value_or(c.n_heads); }

int64_t rotary_dim_of(const ModelConfig& c) {
  return static_cast<int64_t>(static_cast<double>(head_dim_of(c)) * c.rope.rotary_pct);
}

void check_model_config(const ModelConfig& c) {
  if (c.d_model <= 0 || c.n_heads <= 0 || c.n_layers <= 0)
    throw InputError("model.d_model, model.n_heads and model.n_layers must be positive");
  if (!c.head_dim && c.d_model % c.n_heads != 0)
    throw InputError("model.n_heads (" + std::to_string(c.n_heads) + ") must divide model.d_model (" +
                     std::to_string(c.d_model) + ")");
  check_llama_keys(c);
  vocab_size_of(c);
  max_positions_of(c);
  const auto m = c.extension.method;
  const auto scheme = position_scheme(c.arch);
  bool ok = m == ExtensionMethod::none || m == ExtensionMethod::interpolate;
  if (scheme == PositionScheme::rope)
    ok = ok || m == ExtensionMethod::ntk || m == ExtensionMethod::dynamic_ntk || m == ExtensionMethod::yarn ||
         m == ExtensionMethod::llama3 || m == ExtensionMethod::longrope;
  if (scheme == PositionScheme::alibi)
    ok = ok || m == ExtensionMethod::dynamic_interpolate || m == ExtensionMethod::ntk_alibi;
  if (!ok)
    throw InputError("model.extension.method " + method_name(m) + " does not apply to model.arch " +
                     enum_name(kArchs, c.arch) +
                     " (learned: interpolate; rope: interpolate|ntk|dynamic_ntk|yarn|llama3|longrope; "
                     "alibi: interpolate|dynamic_interpolate|ntk_alibi)");
  if (m != ExtensionMethod::none && factor_of(c) < 1.0)
    throw InputError("model.extension.factor must be >= 1, got " + std::to_string(factor_of(c)));
  if (scheme == PositionScheme::rope) {
    const int64_t rd = rotary_dim_of(c);
    if (rd < 2 || rd % 2 != 0)
      throw InputError("model.rope.rotary_pct gives " + std::to_string(rd) +
                       " rotary dimensions per head; need an even number >= 2");
    if ((m == ExtensionMethod::ntk || m == ExtensionMethod::dynamic_ntk) && rd <= 2)
      throw InputError("NTK scaling needs more than 2 rotary dimensions (exponent d/(d-2))");
    if (m == ExtensionMethod::llama3) check_llama3(c.extension.llama3);
    if (m == ExtensionMethod::longrope) check_longrope(c.extension.longrope, rd / 2);
  }
}

// --- APE ---------------------------------------------------------------------

int64_t ape_rows(const ModelConfig& c) {
  const int64_t lt = original_length_of(c);
  if (c.extension.method != ExtensionMethod::interpolate) return max_positions_of(c);
  return static_cast<int64_t>(std::llround(factor_of(c) * static_cast<double>(lt)));
}

at::Tensor ape_source_positions(int64_t old_rows, int64_t new_rows) {
  // i / beta in fp64 so that integer beta gives exact integers and exact i % beta.
  const double beta = static_cast<double>(new_rows) / static_cast<double>(old_rows);
  auto x = at::arange(new_rows, at::kDouble) / beta;
  return x.clamp_max(static_cast<double>(old_rows - 1));
}

at::Tensor interpolate_ape_table(const at::Tensor& table, int64_t new_rows) {
  const int64_t old_rows = table.size(0);
  if (new_rows < old_rows)
    throw InputError("APE interpolation shrinks the table from " + std::to_string(old_rows) + " to " +
                     std::to_string(new_rows) + " rows; factor must be >= 1");
  const auto x = ape_source_positions(old_rows, new_rows);
  const auto lo = x.floor().to(at::kLong);
  const auto hi = (lo + 1).clamp_max(old_rows - 1);
  const auto w = (x - lo.to(at::kDouble)).to(at::kFloat).unsqueeze(1);
  const auto t = table.to(at::kFloat);
  return (t.index_select(0, lo) * (1 - w) + t.index_select(0, hi) * w).to(table.scalar_type());
}

// --- RoPE --------------------------------------------------------------------

namespace {

// Same expression and dtypes as transformers so the tables agree to the last bit.
at::Tensor rope_inv_freq(double base, int64_t dim) {
  auto exponent = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
  return 1.0 / at::pow(base, exponent);
}

}  // namespace

RopeParams rope_params(const ModelConfig& c, int64_t seq_len) {
  const int64_t dim = rotary_dim_of(c);
  const double theta = c.rope.theta;
  const double f = factor_of(c);
  const double d = static_cast<double>(dim);
  const double l = static_cast<double>(original_length_of(c));
  RopeParams p;
  p.base = theta;
  switch (c.extension.method) {
    case ExtensionMethod::none:
      p.inv_freq = rope_inv_freq(theta, dim);
      break;
    case ExtensionMethod::interpolate:
      p.inv_freq = rope_inv_freq(theta, dim) / f;
      break;
    case ExtensionMethod::ntk:
      p.base = theta * std::pow(f, d / (d - 2));
      p.inv_freq = rope_inv_freq(p.base, dim);
      break;
    case ExtensionMethod::dynamic_ntk: {
      // Below the original length the base is unchanged (transformers resets to it).
      const double s = std::max(static_cast<double>(seq_len), l);
      p.base = theta * std::pow(f * s / l - (f - 1), d / (d - 2));
      p.inv_freq = rope_inv_freq(p.base, dim);
      break;
    }
    case ExtensionMethod::yarn: {
      // Dimensions that rotate more than beta_fast times over the original length
      // keep their frequency, fewer than beta_slow times are interpolated by f,
      // and a linear ramp blends the ones between.
      auto correction_dim = [&](double rotations) {
        return d * std::log(l / (rotations * 2 * std::numbers::pi)) / (2 * std::log(theta));
      };
      double low = std::max(std::floor(correction_dim(c.extension.yarn.beta_fast)), 0.0);
      double high = std::min(std::ceil(correction_dim(c.extension.yarn.beta_slow)), d - 1);
      if (low == high) high += 0.001;
      auto ramp = ((at::arange(dim / 2, at::kFloat) - low) / (high - low)).clamp(0, 1);
      auto pos_freqs = at::pow(theta, at::arange(0, dim, 2, at::kLong).to(at::kFloat) / d);
      auto extrapolated = 1.0 / pos_freqs;
      auto interpolated = 1.0 / (f * pos_freqs);
      p.inv_freq = interpolated * ramp + extrapolated * (1 - ramp);
      p.attention_scale = c.extension.yarn.attention_factor.value_or(f <= 1 ? 1.0 : 0.1 * std::log(f) + 1.0);
      break;
    }
    case ExtensionMethod::llama3: {
      // transformers' _compute_llama3_parameters, in the same fp32 tensor order; Python's
      // scalar / tensor is reciprocal() * scalar, which C++'s operator/ is not.
      const auto& l3 = c.extension.llama3;
      const auto inv_freq = rope_inv_freq(theta, dim);
      const double low_wavelen = l / l3.low_freq_factor, high_wavelen = l / l3.high_freq_factor;
      const auto wavelen = inv_freq.reciprocal() * (2 * std::numbers::pi);
      auto scaled = at::where(wavelen > low_wavelen, inv_freq / f, inv_freq);
      const auto smooth = (wavelen.reciprocal() * l - l3.low_freq_factor) / (l3.high_freq_factor - l3.low_freq_factor);
      const auto smoothed = (1 - smooth) * scaled / f + smooth * scaled;
      const auto medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
      p.inv_freq = at::where(medium, smoothed, scaled);
      break;
    }
    case ExtensionMethod::longrope: {
      // transformers' _compute_longrope_parameters: short factors up to the original
      // length, long ones past it (seq_len is the largest position id + 1, as its update).
      const auto& lr = c.extension.longrope;
      const auto& factors = seq_len > original_length_of(c) ? lr.long_factor : lr.short_factor;
      const auto ext = at::tensor(std::vector<float>(factors.begin(), factors.end()), at::kFloat);
      const auto shape = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / d;
      p.inv_freq = 1.0 / (ext * at::pow(theta, shape));
      p.attention_scale = lr.attention_factor.value_or(f <= 1 ? 1.0 : std::sqrt(1 + std::log(f) / std::log(l)));
      break;
    }
    default:
      throw InputError("model.extension.method " + method_name(c.extension.method) + " does not apply to RoPE");
  }
  return p;
}

// --- ALiBi -------------------------------------------------------------------

at::Tensor alibi_slopes(int64_t heads) {
  const int64_t n = int64_t{1} << static_cast<int>(std::floor(std::log2(static_cast<double>(heads))));
  // BLOOM computes base^power in fp32 with an fp32 base; do the same.
  auto base = at::full({}, std::pow(2.0, -8.0 / static_cast<double>(n)), at::kFloat);
  auto slopes = at::pow(base, at::arange(1, n + 1, at::kInt));
  if (n != heads) {
    auto extra_base = at::full({}, std::pow(2.0, -4.0 / static_cast<double>(n)), at::kFloat);
    const int64_t remaining = std::min(n, heads - n);
    slopes = at::cat({slopes, at::pow(extra_base, at::arange(1, 1 + 2 * remaining, 2, at::kInt))});
  }
  return slopes;
}

at::Tensor ntk_alibi_slopes(int64_t heads, double a) {
  auto m = alibi_slopes(heads).to(at::kDouble);
  at::Tensor t;
  if (heads == 1) {
    t = at::ones_like(m);
  } else {
    const auto log_max = m.max().log();
    const auto log_min = m.min().log();
    t = (log_max - m.log()) / (log_max - log_min);
  }
  return (m / at::pow(at::full({}, a, at::kDouble), t)).to(at::kFloat);
}

at::Tensor alibi_slopes_for(const ModelConfig& c, int64_t seq_len) {
  const int64_t h = c.n_heads;
  switch (c.extension.method) {
    case ExtensionMethod::none:
      return alibi_slopes(h);
    case ExtensionMethod::interpolate: {
      const double f = factor_of(c);
      return f > 1 ? alibi_slopes(h) / f : alibi_slopes(h);
    }
    case ExtensionMethod::dynamic_interpolate: {
      const auto l = original_length_of(c);
      return seq_len > l ? alibi_slopes(h) * (static_cast<double>(l) / static_cast<double>(seq_len))
                         : alibi_slopes(h);
    }
    case ExtensionMethod::ntk_alibi:
      return ntk_alibi_slopes(h, factor_of(c));
    default:
      throw InputError("model.extension.method " + method_name(c.extension.method) + " does not apply to ALiBi");
  }
}

}  // namespace segtrain::models
