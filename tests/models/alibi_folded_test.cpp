// ALiBi folded into q·k (models/modules/alibi_folded.h): its digits and constants give
// every position its own exact bias where a bf16 bias tensor gives neighbours one value
// (the ALiBi precision study's figure), and attention through the folded dimensions equals
// attention with the fp32 bias tensor (and the direct fp32 loop) in value and gradient,
// in fp32 and in bf16, with grouped-query heads and segmented positions past 65,536. On a
// GPU the gpu suite runs it on CUDA's fused kernel (tests/gpu, FusedKernels).
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <cmath>
#include <set>

#include "models/modules/alibi_folded.h"
#include "models/modules/attention.h"
#include "models/modules/positions.h"
#include "reference.h"

namespace segtrain::models {
namespace {

// What the kernel's accumulator adds to q·k for each key: the products of the folded
// dimensions summed in fp32 (each product of two bf16 values is exact in fp32).
at::Tensor folded_bias(const FoldedAlibi& f) {
  return (f.q_dims.to(at::kFloat) * f.k_dims.to(at::kFloat)).sum(-1);  // [B, H, T]
}

TEST(FoldedAlibi, EveryPositionKeepsItsOwnBiasWhereABf16BiasMergesNeighbours) {
  // Head 0 of 32 (slope 2^-0.25) over positions 8000..8191 of a row that starts at 0: the
  // biases m p_j of the study's Figure 4, as the kernel's accumulator sums them.
  const int64_t head_dim = 128;
  const auto slopes = alibi_slopes(32);
  auto positions = at::cat({at::zeros({1}, at::kLong), at::arange(8000, 8192, at::kLong)}).view({1, -1});
  const auto folded = fold_alibi(positions, slopes, head_dim, at::kBFloat16);
  ASSERT_EQ(folded.q_dims.scalar_type(), at::kBFloat16);
  ASSERT_EQ(folded.q_dims.sizes(), (std::vector<int64_t>{1, 32, 1, kFoldedAlibiDims}));
  ASSERT_EQ(folded.k_dims.sizes(), (std::vector<int64_t>{1, 1, 193, kFoldedAlibiDims}));
  const auto bias = folded_bias(folded)[0][0] / std::sqrt(double(head_dim));  // head 0, in logits
  std::set<float> folded_values, bf16_values;
  const double m = slopes[0].item<double>();
  for (int64_t j = 1; j <= 192; ++j) {
    const double p = static_cast<double>(8000 + j - 1);
    folded_values.insert(bias[j].item<float>());
    // What a bias tensor in the kernel's dtype would hold.
    bf16_values.insert(at::scalar_tensor(m * p).to(at::kBFloat16).item<float>());
    // The slope pair carries 16 significant bits; the sum is fp32.
    EXPECT_NEAR(bias[j].item<double>(), m * p, 2e-5 * m * p) << p;
  }
  EXPECT_EQ(folded_values.size(), 192u);
  EXPECT_LE(bf16_values.size(), 8u);  // bf16 spaces values 32 apart near 6,700: about 38 positions a value
}

TEST(FoldedAlibi, DigitsCoverPositionsUpToTheSpanLimitExactly) {
  // From the row's first position, up and down (a row need not start at its smallest).
  const std::vector<int64_t> ids = {5, 0, 255, 256, 65535, 65536, 1000000, kFoldedAlibiMaxSpan + 4};
  const auto positions = at::tensor(ids, at::kLong).view({1, -1});
  const auto slope = at::tensor({1.0f / 256});
  const auto folded = fold_alibi(positions, slope, 64, at::kBFloat16);
  const auto k = folded.k_dims.to(at::kDouble)[0][0];
  for (int64_t j = 0; j < positions.size(1); ++j) {
    const double p = static_cast<double>(ids[j] - 5);
    EXPECT_EQ(k[j][0].item<double>() * 65536 + k[j][1].item<double>() * 256 + k[j][2].item<double>(), p) << p;
    EXPECT_EQ(k[j][3].item<double>() * 65536 + k[j][4].item<double>() * 256 + k[j][5].item<double>(), p) << p;
  }
}

// Where precision allows: m (p_i - p_0) up to 2^14, heads up to 248, spans below 2^24; the CPU
// keeps the bias tensor whatever they are.
TEST(FoldedAlibi, FoldsOnlyWherePrecisionAllows) {
  const PositionBounds window{0, 32768, false};
  EXPECT_TRUE(alibi_folds_within_precision(64, window, 0.5));          // 0.5 x 32,768 = 2^14
  EXPECT_FALSE(alibi_folds_within_precision(64, {0, 32770, false}, 0.5));
  EXPECT_TRUE(alibi_folds_within_precision(64, {0, 1 << 20, false}, 0.5 / 64));  // slopes interpolated 64x
  EXPECT_FALSE(alibi_folds_within_precision(256, window, 1e-6));       // 264 dimensions: past flash's 256
  EXPECT_FALSE(alibi_folds_within_precision(64, {0, kFoldedAlibiMaxSpan, false}, 1e-9));
  EXPECT_FALSE(folds_alibi(c10::Device(at::kCPU), 64, window, at::full({4}, 0.5f)));
}

struct Inputs {
  at::Tensor q, k, v, positions;
};

// Segmented samples: chunks of a window with their original ids, past 65,536 (three digits).
Inputs segmented_inputs(int64_t h, int64_t h_kv, int64_t d) {
  at::manual_seed(17);
  const int64_t b = 2, t = 12;
  auto positions = at::tensor({0, 1, 2, 3, 70000, 70001, 70002, 70003, 140000, 140001, 140002, 140003,
                               9, 10, 11, 12, 13, 14, 15, 300, 301, 302, 303, 304}, at::kLong).view({b, t});
  return {at::randn({b, h, t, d}).requires_grad_(), at::randn({b, h_kv, t, d}).requires_grad_(),
          at::randn({b, h_kv, t, d}).requires_grad_(), positions};
}

// Slopes interpolated to a long window, as an extended run uses them; by 48, so that no slope
// over SDPA's scale is a power of two and the pair's low half is used too.
at::Tensor long_range_slopes(int64_t h) { return alibi_slopes(h) / 48.0; }

TEST(FoldedAlibi, AttentionEqualsTheFp32BiasTensorsInValueAndGradient) {
  for (const int64_t h_kv : {int64_t{4}, int64_t{2}}) {
    const int64_t h = 4, d = 16;
    const auto in = segmented_inputs(h, h_kv, d);
    const auto slopes = long_range_slopes(h);
    const auto bounds = PositionBounds::of(in.positions);
    const auto folded = fold_alibi(in.positions, slopes, d, at::kFloat);
    ASSERT_TRUE(folded.q_dims.narrow(-1, 3, 3).ne(0).any().item<bool>());  // the low half carries bits
    const auto got = folded_alibi_attention(in.q, in.k, in.v, folded);
    const auto want = causal_attention(in.q, in.k, in.v, alibi_causal_mask(in.positions, slopes));
    ASSERT_EQ(got.sizes(), want.sizes());
    // The header's bound: the fp32 accumulator rounds each logit, near m (p_i - p_0) (at most
    // 2^-8 / 48 * 140,003 = 729 here), to 2^-24 of it, a few times over (q·k's own sum, the scale).
    const double largest = slopes.max().item<double>() * static_cast<double>(bounds.end - 1 - bounds.lowest);
    const double bound = 4.0 * std::ldexp(largest, -24);
    EXPECT_LT(test::max_abs_diff(got, want), bound) << "h_kv " << h_kv;
    const auto upstream = at::randn(got.sizes());
    const auto g = torch::autograd::grad({got}, {in.q, in.k, in.v}, {upstream});
    const auto w = torch::autograd::grad({want}, {in.q, in.k, in.v}, {upstream});
    for (size_t i = 0; i < 3; ++i)
      EXPECT_LT(test::max_abs_diff(g[i], w[i]), 2.0 * bound) << "gradient " << i << " h_kv " << h_kv;
  }
}

TEST(FoldedAlibi, InBf16ItStaysWithinBf16OfTheFp32Reference) {
  const int64_t h = 4, d = 32;
  const auto in = segmented_inputs(h, h, d);
  const auto slopes = long_range_slopes(h);
  const auto folded = fold_alibi(in.positions, slopes, d, at::kBFloat16);
  const auto q = in.q.detach().to(at::kBFloat16), k = in.k.detach().to(at::kBFloat16),
             v = in.v.detach().to(at::kBFloat16);
  const auto got = folded_alibi_attention(q, k, v, folded);
  ASSERT_EQ(got.scalar_type(), at::kBFloat16);
  // The reference: the same bf16-rounded inputs, attention in fp32 with the fp32 bias.
  const auto want = causal_attention(q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat),
                                     alibi_causal_mask(in.positions, slopes));
  EXPECT_LT(test::max_abs_diff(got.to(at::kFloat), want), 3e-2);
}

}  // namespace
}  // namespace segtrain::models
