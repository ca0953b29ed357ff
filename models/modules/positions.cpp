#include "models/modules/positions.h"

#include <cmath>
#include <numbers>
#include <string>

#include "common/error.h"

namespace segtrain::models {

namespace {

std::string method_name(ExtensionMethod m) { return enum_name(kExtensionMethods, m); }

}  // namespace

// --- APE ---------------------------------------------------------------------

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
      p.base = ntk_base(c);
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
