// The report's intervals (trainer/experiment/intervals.h): Wilson's interval against
// published values, the bootstrap's units, exact invariants of the paired difference,
// and its coverage on simulated rows whose true difference is known.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "trainer/experiment/intervals.h"

namespace segtrain::trainer {
namespace {

// Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table I
// (method 3, the score interval), and the 0/n, n/n rows it gives.
TEST(Intervals, WilsonMatchesNewcombesTable) {
  struct Case { int64_t k, n; double lo, hi; };
  for (const Case c : {Case{81, 263, 0.2553, 0.3662}, Case{15, 148, 0.0624, 0.1605}, Case{0, 20, 0.0, 0.1611},
                       Case{1, 29, 0.0061, 0.1718}, Case{29, 29, 0.8830, 1.0}}) {
    const Interval w = wilson_interval(c.k, c.n);
    EXPECT_NEAR(w.lo, c.lo, 5e-5) << c.k << "/" << c.n;
    EXPECT_NEAR(w.hi, c.hi, 5e-5) << c.k << "/" << c.n;
    EXPECT_DOUBLE_EQ(w.estimate, static_cast<double>(c.k) / static_cast<double>(c.n));
  }
  // 3 of 3 passkeys: the study's small samples say little, and the interval shows it.
  EXPECT_NEAR(wilson_interval(3, 3).lo, 0.4385, 5e-5);
  EXPECT_TRUE(std::isnan(wilson_interval(0, 0).estimate));
}

WindowLoss window_of(int64_t doc, int64_t predictions, double loss_per_token) {
  WindowLoss w{doc, 0, {}};
  for (int64_t first = 0; first < predictions; first += kLossBlock)
    w.block_nll.push_back(loss_per_token * static_cast<double>(std::min(kLossBlock, predictions - first)));
  return w;
}

TEST(Intervals, EveryLengthIsCutIntoSixteenUnitsAWindowThatKeepEveryPrediction) {
  for (int64_t length : {2048, 8192, 16384, 32768}) {
    const int64_t predictions = length - 1;
    const LossUnits u = loss_units({window_of(3, predictions, 2.0), window_of(7, predictions, 1.0)}, predictions);
    ASSERT_EQ(u.nll.size(), 2 * static_cast<size_t>(kUnitsPerWindow)) << length;
    int64_t count = 0;
    double nll = 0;
    for (size_t i = 0; i < u.nll.size(); ++i) count += u.count[i], nll += u.nll[i];
    EXPECT_EQ(count, 2 * predictions);
    EXPECT_NEAR(nll, 3.0 * static_cast<double>(predictions), 1e-6);
    EXPECT_EQ(u.count.front(), length / kUnitsPerWindow);
    EXPECT_EQ(u.count[kUnitsPerWindow - 1], length / kUnitsPerWindow - 1);  // the window's last unit
    EXPECT_EQ(u.where[kUnitsPerWindow].substr(0, 2), "7:");
  }
  EXPECT_THROW(loss_units({window_of(1, 2047, 1.0)}, 8191), std::invalid_argument);
}

// 4 windows (documents 0-3) of `predictions`, each block's loss `loss_per_token` plus noise.
std::vector<WindowLoss> noisy_windows(std::mt19937_64& rng, double sd, int64_t predictions, double loss_per_token) {
  std::normal_distribution<double> noise(0.0, sd);
  std::vector<WindowLoss> windows;
  for (int64_t doc = 0; doc < 4; ++doc) {
    WindowLoss w = window_of(doc, predictions, loss_per_token);
    for (auto& b : w.block_nll) b += 128 * noise(rng);
    windows.push_back(w);
  }
  return windows;
}

TEST(Intervals, APairedDifferenceOfTheSameRowIsZeroAndAConstantShiftIsExact) {
  std::mt19937_64 rng(7);
  const std::vector<WindowLoss> windows = noisy_windows(rng, 0.5, 32767, 1.0);
  const LossUnits a = loss_units(windows, 32767);
  const PairedDifference same = paired_difference(a, a);
  EXPECT_EQ(same.difference.lo, 0.0);
  EXPECT_EQ(same.difference.hi, 0.0);
  EXPECT_FALSE(same.difference.excludes_zero());
  // Every prediction 0.1 nats worse: ppl ratio exp(0.1) whatever is drawn.
  std::vector<WindowLoss> worse = windows;
  for (auto& w : worse)
    for (size_t b = 0; b < w.block_nll.size(); ++b)
      w.block_nll[b] += 0.1 * static_cast<double>(std::min<int64_t>(kLossBlock, 32767 - b * kLossBlock));
  const PairedDifference d = paired_difference(loss_units(worse, 32767), a);
  EXPECT_NEAR(d.relative.estimate, std::exp(0.1) - 1, 1e-12);
  EXPECT_NEAR(d.relative.lo, std::exp(0.1) - 1, 1e-12);
  EXPECT_NEAR(d.relative.hi, std::exp(0.1) - 1, 1e-12);
  EXPECT_TRUE(d.difference.excludes_zero());
  EXPECT_GT(d.difference.lo, 0.0);
  // Rows scored on other windows do not pair.
  std::vector<WindowLoss> elsewhere = windows;
  elsewhere[2].doc = 9;
  EXPECT_THROW(paired_difference(loss_units(elsewhere, 32767), a), std::invalid_argument);
}

// Simulated rows: every unit has a difficulty both rows share (large), and each row its
// own noise (small); B is A shifted by a true 2% in perplexity. The paired interval
// covers the truth about 95% of the time, and it is far narrower than either row's own
// perplexity interval, which carries the shared difficulty (an unpaired comparison would).
TEST(Intervals, PairedIntervalsCoverTheTrueDifferenceAboutNinetyFivePercentOfTheTime) {
  const double shift = std::log(1.02);
  std::mt19937_64 rng(11);
  std::normal_distribution<double> difficulty(0.0, 0.6), own(0.0, 0.05);
  int covered = 0;
  const int trials = 300;
  double paired_width = 0, row_width = 0;
  for (int t = 0; t < trials; ++t) {
    LossUnits a, b;
    for (int64_t unit = 0; unit < 4 * kUnitsPerWindow; ++unit) {
      const double shared = 1.0 + difficulty(rng);
      const int64_t count = 2048;
      a.nll.push_back(count * (shared + own(rng)));
      b.nll.push_back(count * (shared + shift + own(rng)));
      a.count.push_back(count), b.count.push_back(count);
      a.where.push_back(std::to_string(unit)), b.where.push_back(std::to_string(unit));
    }
    const PairedDifference d = paired_difference(b, a, 2000, 100 + t);
    covered += d.relative.lo <= 0.02 && 0.02 <= d.relative.hi;
    paired_width += d.relative.hi - d.relative.lo;
    const Interval own_ppl = perplexity_interval(a, 2000, 100 + t);
    EXPECT_LE(own_ppl.lo, own_ppl.estimate);
    EXPECT_GE(own_ppl.hi, own_ppl.estimate);
    row_width += (own_ppl.hi - own_ppl.lo) / own_ppl.estimate;
  }
  const double coverage = static_cast<double>(covered) / trials;
  EXPECT_GE(coverage, 0.90);
  EXPECT_LE(coverage, 0.99);
  EXPECT_LT(paired_width, 0.2 * row_width);
}

// Documents, not blocks: a difference that one window (one document) of four carries is not
// found, however clear it is inside that window, since a resample can leave that document out;
// one that every window shows is found, and window_agreement counts the windows on each side.
TEST(Intervals, AnEffectInOneDocumentIsNotFoundAndAnEffectInEveryDocumentIs) {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> noise(0.0, 0.3);
  const std::vector<WindowLoss> base = noisy_windows(rng, 0.3, 8191, 2.0);
  // 0.05 nats a prediction lower: in window 0 alone, or in every window (with noise of its own).
  auto lowered = [&](bool everywhere) {
    std::vector<WindowLoss> out = base;
    for (size_t w = 0; w < out.size(); ++w) {
      if (!everywhere && w > 0) continue;
      for (size_t b = 0; b < out[w].block_nll.size(); ++b)
        out[w].block_nll[b] -= 0.05 * static_cast<double>(std::min<int64_t>(kLossBlock, 8191 - b * kLossBlock)) -
                               (everywhere ? 2 * noise(rng) : 0.0);
    }
    return loss_units(out, 8191);
  };
  const LossUnits b = loss_units(base, 8191), one = lowered(false), every = lowered(true);
  const PairedDifference in_one = paired_difference(one, b);
  EXPECT_LT(in_one.relative.estimate, -0.01);  // the pooled estimate: about a quarter of 5%
  EXPECT_FALSE(in_one.relative.excludes_zero()) << in_one.relative.lo << " " << in_one.relative.hi;
  const WindowAgreement one_side = window_agreement(one, b);
  EXPECT_EQ(one_side.windows, 4);
  EXPECT_EQ(one_side.lower, 1);
  EXPECT_EQ(one_side.higher, 0);
  const PairedDifference in_every = paired_difference(every, b);
  EXPECT_TRUE(in_every.relative.excludes_zero()) << in_every.relative.lo << " " << in_every.relative.hi;
  EXPECT_LT(in_every.relative.hi, 0.0);
  EXPECT_EQ(window_agreement(every, b).lower, 4);
}

// Robustness: a difference that is found only because one document's large effect sits on
// top of small, mixed effects in the 7 others rests on that document (leaving it out, the
// interval includes 0): documents_carrying names it. An effect of about the same size in all
// 8 documents survives leaving any one out, and nothing is named.
TEST(Intervals, AFindingOneOfEightDocumentsCarriesNamesItAndOneAllEightCarryNamesNone) {
  const int64_t predictions = 8191;
  std::mt19937_64 rng(9);
  std::vector<WindowLoss> base;
  for (int64_t doc = 0; doc < 8; ++doc) {
    WindowLoss w = window_of(doc, predictions, 2.0 + 0.1 * static_cast<double>(doc));
    std::normal_distribution<double> noise(0.0, 0.2);
    for (auto& b : w.block_nll) b += 128 * noise(rng);
    base.push_back(w);
  }
  // Row a: every prediction of document d `shift[d]` nats above the base.
  auto shifted = [&](const std::vector<double>& shift) {
    std::vector<WindowLoss> out = base;
    for (size_t d = 0; d < out.size(); ++d)
      for (size_t b = 0; b < out[d].block_nll.size(); ++b)
        out[d].block_nll[b] += shift[d] * static_cast<double>(std::min<int64_t>(kLossBlock, predictions - b * kLossBlock));
    return loss_units(out, predictions);
  };
  const LossUnits b = loss_units(base, predictions);
  const LossUnits one = shifted({0.9, 0.030, -0.015, 0.027, 0.012, -0.012, 0.021, 0.012});
  const PairedDifference found = paired_difference(one, b);
  ASSERT_TRUE(found.difference.excludes_zero()) << found.difference.lo << " " << found.difference.hi;
  const std::vector<int64_t> carriers = documents_carrying(one, b);
  EXPECT_NE(std::find(carriers.begin(), carriers.end(), 0), carriers.end()) << "document 0 carries the effect";
  EXPECT_LT(carriers.size(), 8u);

  const LossUnits every = shifted({0.05, 0.04, 0.06, 0.05, 0.045, 0.055, 0.05, 0.05});
  ASSERT_TRUE(paired_difference(every, b).difference.excludes_zero());
  EXPECT_TRUE(documents_carrying(every, b).empty());
  // Nothing found, nothing carried: the same row against itself.
  EXPECT_TRUE(documents_carrying(b, b).empty());
}

}  // namespace
}  // namespace segtrain::trainer
