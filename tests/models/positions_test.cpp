// Positional math against independent references: Karypis et al.'s APE formula written
// out literally, transformers' rope init functions, BLOOM's build_alibi_tensor and
// the NTK-ALiBi note's NTK-ALiBi code (all produced by hf_reference.py).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "common/error.h"
#include "models/modules/positions.h"
#include "models/spec/config_rules.h"
#include "reference.h"

namespace segtrain::models {
namespace {

using nlohmann::json;

json positions_reference() { return json::parse(test::read_file(test::reference_dir() + "/positions.json")); }

at::Tensor tensor_of(const json& values) { return at::tensor(values.get<std::vector<double>>(), at::kDouble); }

// Seed 004, section 3.2, for integral beta: e'_i = (beta - i%beta)/beta e_{i/beta}
// + (i%beta)/beta e_{i/beta+1}; the beta-1 rows past beta(L_t-1) copy the last row.
at::Tensor seed004_table(const at::Tensor& e, int64_t beta) {
  const int64_t lt = e.size(0);
  auto out = at::zeros({lt * beta, e.size(1)}, at::kDouble);
  auto ed = e.to(at::kDouble);
  for (int64_t i = 0; i < lt * beta; ++i) {
    if (i > beta * (lt - 1)) {
      out[i] = ed[lt - 1];
      continue;
    }
    const int64_t j = i / beta, r = i % beta;
    auto row = ed[j] * static_cast<double>(beta - r) / static_cast<double>(beta);
    if (r != 0) row = row + ed[j + 1] * static_cast<double>(r) / static_cast<double>(beta);
    out[i] = row;
  }
  return out;
}

TEST(Ape, IntegerFactorFollowsSeed004Formula) {
  auto e = at::randn({16, 5});
  for (int64_t beta : {1, 2, 4}) {
    auto got = interpolate_ape_table(e, 16 * beta);
    EXPECT_LT(test::max_abs_diff(got, seed004_table(e, beta)), 1e-6) << "beta " << beta;
    // The original rows are kept exactly.
    EXPECT_TRUE(at::equal(got.slice(0, 0, 16 * beta, beta), e)) << "beta " << beta;
  }
}

TEST(Ape, NonIntegerFactorInterpolatesLinearlyAtIOverBeta) {
  auto e = at::randn({10, 3}, at::kDouble);
  const int64_t rows = 25;  // beta = 2.5
  auto got = interpolate_ape_table(e, rows);
  for (int64_t i = 0; i < rows; ++i) {
    const double x = std::min(static_cast<double>(i) / 2.5, 9.0);
    const auto lo = static_cast<int64_t>(std::floor(x));
    const double w = x - static_cast<double>(lo);
    auto want = e[lo] * (1 - w) + (w > 0 ? e[lo + 1] * w : at::zeros_like(e[lo]));
    EXPECT_LT(test::max_abs_diff(got[i], want), 1e-6) << "row " << i;
  }
}

ModelConfig rope_config(const json& c) {
  ModelConfig m;
  m.arch = Arch::gpt_neox;
  m.vocab_size = 10;
  m.n_heads = 4;
  m.d_model = 4 * c["head_dim"].get<int64_t>();
  m.max_positions = c["original_length"].get<int64_t>();
  m.rope.theta = c["theta"].get<double>();
  m.rope.rotary_pct = c["rotary_pct"].get<double>();
  m.extension.method = *enum_from_name(kExtensionMethods, c["method"].get<std::string>());
  m.extension.factor = c["factor"].get<double>();
  if (c.contains("beta_fast")) m.extension.yarn.beta_fast = c["beta_fast"].get<double>();
  if (c.contains("beta_slow")) m.extension.yarn.beta_slow = c["beta_slow"].get<double>();
  if (c.contains("attention_factor")) {
    m.extension.yarn.attention_factor = c["attention_factor"].get<double>();
    m.extension.longrope.attention_factor = c["attention_factor"].get<double>();
  }
  if (c.contains("low_freq_factor")) m.extension.llama3.low_freq_factor = c["low_freq_factor"].get<double>();
  if (c.contains("high_freq_factor")) m.extension.llama3.high_freq_factor = c["high_freq_factor"].get<double>();
  if (c.contains("short_factor")) m.extension.longrope.short_factor = c["short_factor"].get<std::vector<double>>();
  if (c.contains("long_factor")) m.extension.longrope.long_factor = c["long_factor"].get<std::vector<double>>();
  return m;
}

TEST(Rope, EveryScalingEqualsTransformersRopeInitFunctions) {
  const auto ref = positions_reference();
  ASSERT_GE(ref["rope"].size(), 13u);  // default, theta, linear, dynamic x2, yarn x2, llama3 x2, longrope x3, ntk
  for (const auto& c : ref["rope"]) {
    const auto name = c["name"].get<std::string>();
    const auto p = rope_params(rope_config(c), c["seq_len"].get<int64_t>());
    const auto want = tensor_of(c["inv_freq"]);
    ASSERT_EQ(p.inv_freq.numel(), want.numel()) << name;
    EXPECT_TRUE(at::allclose(p.inv_freq.to(at::kDouble), want, 1e-6, 0)) << name << "\n" << p.inv_freq << want;
    EXPECT_NEAR(p.attention_scale, c["attention_scale"].get<double>(), 1e-9) << name;
    EXPECT_EQ(p.inv_freq.scalar_type(), at::kFloat) << name;
  }
}

TEST(Alibi, SlopesEqualBloomForOneToFortyHeads) {
  const auto ref = positions_reference();
  for (int64_t h = 1; h <= 40; ++h) {
    auto want = tensor_of(ref["alibi"]["bloom_slopes"][std::to_string(h)]);
    EXPECT_TRUE(at::equal(alibi_slopes(h).to(at::kDouble), want)) << h << " heads";
  }
}

TEST(Alibi, NtkSlopesEqualSeed001CodeForPowersOfTwo) {
  const auto ref = positions_reference();
  ASSERT_EQ(ref["alibi"]["ntk_alibi"].size(), 6u);
  for (const auto& c : ref["alibi"]["ntk_alibi"]) {
    const auto h = c["heads"].get<int64_t>();
    const auto a = c["a"].get<double>();
    auto got = ntk_alibi_slopes(h, a).to(at::kDouble);
    EXPECT_TRUE(at::allclose(got, tensor_of(c["slopes"]), 1e-6, 0)) << h << " heads, a=" << a;
  }
}

TEST(Alibi, NtkRuleForOtherHeadCountsKeepsSteepestAndDividesShallowest) {
  for (int64_t h : {6, 12, 20}) {
    const double a = 3.0;
    auto base = alibi_slopes(h).to(at::kDouble);
    auto got = ntk_alibi_slopes(h, a).to(at::kDouble);
    const auto steep = base.argmax().item<int64_t>(), shallow = base.argmin().item<int64_t>();
    EXPECT_NEAR(got[steep].item<double>(), base[steep].item<double>(), 1e-7);
    EXPECT_NEAR(got[shallow].item<double>(), base[shallow].item<double>() / a, 1e-7);
    // Every head moves towards interpolation by at most a, and steeper heads less.
    auto ratio = base / got;
    EXPECT_TRUE((ratio >= 1 - 1e-6).all().item<bool>());
    EXPECT_TRUE((ratio <= a + 1e-6).all().item<bool>());
    auto order = base.argsort(0, /*descending=*/true);
    auto sorted_ratio = ratio.index_select(0, order);
    EXPECT_TRUE((sorted_ratio.diff() >= -1e-9).all().item<bool>()) << h;
  }
}

ModelConfig alibi_config(ExtensionMethod method, double factor) {
  ModelConfig c;
  c.arch = Arch::bloom;
  c.vocab_size = 10;
  c.d_model = 32;
  c.n_heads = 8;
  c.max_positions = 100;
  c.extension.method = method;
  c.extension.factor = factor;
  return c;
}

TEST(Alibi, InterpolationScalesByTrainedOverExtendedLengthOnlyWhenLonger) {
  const auto base = alibi_slopes(8);
  EXPECT_TRUE(at::allclose(alibi_slopes_for(alibi_config(ExtensionMethod::interpolate, 4.0), 50), base / 4));
  const auto dynamic = alibi_config(ExtensionMethod::dynamic_interpolate, 4.0);
  EXPECT_TRUE(at::equal(alibi_slopes_for(dynamic, 80), base));
  EXPECT_TRUE(at::equal(alibi_slopes_for(dynamic, 100), base));
  EXPECT_TRUE(at::allclose(alibi_slopes_for(dynamic, 250), base * (100.0 / 250.0)));
  EXPECT_TRUE(at::allclose(alibi_slopes_for(alibi_config(ExtensionMethod::ntk_alibi, 2.0), 10),
                           ntk_alibi_slopes(8, 2.0)));
}

TEST(Config, MethodsThatDoNotApplyAndUnresolvedValuesAreInputErrors) {
  auto c = alibi_config(ExtensionMethod::yarn, 2.0);
  EXPECT_THROW(check_model_config(c), InputError);
  c.arch = Arch::gpt2;
  c.extension.method = ExtensionMethod::ntk_alibi;
  EXPECT_THROW(check_model_config(c), InputError);
  c.extension.method = ExtensionMethod::interpolate;
  c.extension.factor.reset();
  EXPECT_THROW(check_model_config(c), InputError);
  c.extension.factor = 2.0;
  c.max_positions.reset();
  EXPECT_THROW(check_model_config(c), InputError);
  c.max_positions = 10;
  c.n_heads = 5;
  EXPECT_THROW(check_model_config(c), InputError);
}

}  // namespace
}  // namespace segtrain::models
