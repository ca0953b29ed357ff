#pragma once
// 95% intervals for the experiment's report: how sure a perplexity, a difference
// between two rows and a passkey accuracy are. Torch-free: it reads the per-window
// loss blocks that evaluate() keeps (trainer/eval/perplexity.h, WindowLoss).
//
// Perplexity: a paired two-stage (cluster) bootstrap. The unit is a block of about
// L/16 contiguous predictions of one window (16 units a window at every length, so
// the same method holds at 2k and 32k). A resample draws as many windows as there
// are, with replacement, then within each drawn window as many of its units as it
// has, with replacement, and the statistic is recomputed on the units drawn. Windows
// first: each comes from another document, and the blocks of one document share its
// style and difficulty, so pooling them as independent would give a small difference
// the interval of a study with 64 documents where it has 4. Paired:
// both rows are read on the same drawn units (the same text), so what the text shares
// cancels. With few windows a percentile interval is still optimistic: the report also
// asks that every window agree (window_agreement), and says which documents a found
// difference rests on (documents_carrying).
#include <cstdint>
#include <string>
#include <vector>

#include "trainer/eval/window_loss.h"

namespace segtrain::trainer {

inline constexpr int64_t kBootstrapResamples = 10000;
inline constexpr uint64_t kBootstrapSeed = 20261125;
// Units a window is cut into for the bootstrap.
inline constexpr int64_t kUnitsPerWindow = 16;

struct Interval {
  double estimate = 0, lo = 0, hi = 0;
  bool excludes_zero() const { return lo > 0 || hi < 0; }
};

// A length's loss as units: each unit's summed loss and its predictions.
struct LossUnits {
  std::vector<double> nll;
  std::vector<int64_t> count;
  // Where each unit lies: "doc:start:first_block", what pairs two rows' units.
  std::vector<std::string> where;
};

// The units of one length's windows (each window's blocks grouped into
// kUnitsPerWindow units); `predictions` = L - 1, the predictions of each window.
LossUnits loss_units(const std::vector<WindowLoss>& windows, int64_t predictions);

// Perplexity with its 95% bootstrap interval (percentile).
Interval perplexity_interval(const LossUnits& a, int64_t resamples = kBootstrapResamples,
                             uint64_t seed = kBootstrapSeed);

// ppl(a) - ppl(b) and ppl(a) / ppl(b) - 1 with their paired 95% intervals; throws
// std::invalid_argument when a and b were not scored on the same units.
struct PairedDifference {
  Interval difference;  // perplexity points
  Interval relative;    // fraction: -0.25 is "a is 25% lower than b"
};
PairedDifference paired_difference(const LossUnits& a, const LossUnits& b, int64_t resamples = kBootstrapResamples,
                                   uint64_t seed = kBootstrapSeed);

// In how many windows row a's loss is lower and higher than row b's (paired on the same
// windows; throws std::invalid_argument otherwise).
struct WindowAgreement {
  int64_t windows = 0, lower = 0, higher = 0;
};
WindowAgreement window_agreement(const LossUnits& a, const LossUnits& b);

// The documents a paired difference rests on: those whose units left out (every window of
// the document, the rest resampled as paired_difference does) leave an interval that no
// longer excludes 0 on the full difference's side. Empty when every document can go, or
// when the full interval does not exclude 0 (nothing found to rest on anything). A
// document is the part of `where` before its first ':'.
std::vector<int64_t> documents_carrying(const LossUnits& a, const LossUnits& b, int64_t resamples = kBootstrapResamples,
                                        uint64_t seed = kBootstrapSeed);

// Wilson's 95% score interval of a proportion (correct of trials, common/wilson.h);
// estimate = correct / trials.
Interval wilson_interval(double correct, int64_t trials);

}  // namespace segtrain::trainer
