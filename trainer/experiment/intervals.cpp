#include "trainer/experiment/intervals.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

#include "common/wilson.h"

namespace segtrain::trainer {
namespace {

// The p-quantile of sorted values, interpolated between neighbours (R's type 7).
double quantile(const std::vector<double>& sorted, double p) {
  const double at = p * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<size_t>(std::floor(at));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  return sorted[below] + (at - static_cast<double>(below)) * (sorted[above] - sorted[below]);
}

double mean_loss(const LossUnits& u) {
  double nll = 0;
  int64_t count = 0;
  for (size_t i = 0; i < u.nll.size(); ++i) nll += u.nll[i], count += u.count[i];
  return nll / static_cast<double>(count);
}

// The units of each window, in order: units whose `where` agrees up to its last ':'
// ("doc:start") share a window; a `where` without ':' is a window of its own.
std::vector<std::vector<size_t>> units_by_window(const LossUnits& u) {
  std::vector<std::vector<size_t>> windows;
  std::vector<std::string> keys;
  for (size_t i = 0; i < u.where.size(); ++i) {
    const std::string key = u.where[i].substr(0, u.where[i].rfind(':'));
    const auto it = std::find(keys.begin(), keys.end(), key);
    if (it == keys.end()) {
      keys.push_back(key);
      windows.push_back({i});
    } else {
      windows[static_cast<size_t>(it - keys.begin())].push_back(i);
    }
  }
  return windows;
}

// Draws `resamples` two-stage resamples of the units (the same draws for every statistic
// given the same seed: mt19937_64's output is fixed by the standard, the modulo is ours):
// as many windows as there are, with replacement, then within each drawn window as many of
// its units as it has, with replacement. Returns the statistic's 2.5% and 97.5% quantiles;
// `statistic` gets the drawn unit indices.
template <class Statistic>
std::pair<double, double> bootstrap(const std::vector<std::vector<size_t>>& windows, int64_t resamples, uint64_t seed,
                                    Statistic statistic) {
  std::mt19937_64 rng(seed);
  std::vector<size_t> drawn;
  std::vector<double> values;
  values.reserve(static_cast<size_t>(resamples));
  for (int64_t r = 0; r < resamples; ++r) {
    drawn.clear();
    for (size_t w = 0; w < windows.size(); ++w) {
      const auto& units = windows[static_cast<size_t>(rng() % windows.size())];
      for (size_t k = 0; k < units.size(); ++k) drawn.push_back(units[static_cast<size_t>(rng() % units.size())]);
    }
    values.push_back(statistic(drawn));
  }
  std::sort(values.begin(), values.end());
  return {quantile(values, 0.025), quantile(values, 0.975)};
}

void check_units(const LossUnits& u) {
  if (u.nll.empty()) throw std::invalid_argument("no per-window losses to compute an interval from");
}

}  // namespace

LossUnits loss_units(const std::vector<WindowLoss>& windows, int64_t predictions) {
  LossUnits out;
  const int64_t blocks = (predictions + kLossBlock - 1) / kLossBlock;
  const int64_t group = std::max<int64_t>(1, (blocks + kUnitsPerWindow - 1) / kUnitsPerWindow);
  for (const auto& w : windows) {
    if (static_cast<int64_t>(w.block_nll.size()) != blocks)
      throw std::invalid_argument("a window of " + std::to_string(predictions + 1) + " tokens has " +
                                  std::to_string(w.block_nll.size()) + " loss blocks, expected " +
                                  std::to_string(blocks));
    for (int64_t first = 0; first < blocks; first += group) {
      double nll = 0;
      for (int64_t b = first; b < std::min(blocks, first + group); ++b) nll += w.block_nll[b];
      out.nll.push_back(nll);
      out.count.push_back(std::min(predictions, (first + group) * kLossBlock) - first * kLossBlock);
      out.where.push_back(std::to_string(w.doc) + ":" + std::to_string(w.start) + ":" + std::to_string(first));
    }
  }
  return out;
}

Interval perplexity_interval(const LossUnits& a, int64_t resamples, uint64_t seed) {
  check_units(a);
  const auto [lo, hi] = bootstrap(units_by_window(a), resamples, seed, [&](const std::vector<size_t>& drawn) {
    double nll = 0;
    int64_t count = 0;
    for (size_t i : drawn) nll += a.nll[i], count += a.count[i];
    return std::exp(nll / static_cast<double>(count));
  });
  return {std::exp(mean_loss(a)), lo, hi};
}

PairedDifference paired_difference(const LossUnits& a, const LossUnits& b, int64_t resamples, uint64_t seed) {
  check_units(a);
  if (a.where != b.where || a.count != b.count)
    throw std::invalid_argument("the two rows were not scored on the same windows");
  const double ma = mean_loss(a), mb = mean_loss(b);
  // Both statistics from the same draws: one pass computes the two means.
  std::vector<std::pair<double, double>> means;
  bootstrap(units_by_window(a), resamples, seed, [&](const std::vector<size_t>& drawn) {
    double na = 0, nb = 0;
    int64_t count = 0;
    for (size_t i : drawn) na += a.nll[i], nb += b.nll[i], count += a.count[i];
    means.emplace_back(na / static_cast<double>(count), nb / static_cast<double>(count));
    return 0.0;
  });
  std::vector<double> difference, relative;
  for (const auto& [x, y] : means) {
    difference.push_back(std::exp(x) - std::exp(y));
    relative.push_back(std::exp(x - y) - 1);
  }
  std::sort(difference.begin(), difference.end());
  std::sort(relative.begin(), relative.end());
  return {{std::exp(ma) - std::exp(mb), quantile(difference, 0.025), quantile(difference, 0.975)},
          {std::exp(ma - mb) - 1, quantile(relative, 0.025), quantile(relative, 0.975)}};
}

std::vector<int64_t> documents_carrying(const LossUnits& a, const LossUnits& b, int64_t resamples, uint64_t seed) {
  const Interval whole = paired_difference(a, b, resamples, seed).difference;
  if (!whole.excludes_zero()) return {};
  std::vector<int64_t> documents;
  for (const auto& where : a.where) {
    const int64_t doc = std::stoll(where.substr(0, where.find(':')));
    if (std::find(documents.begin(), documents.end(), doc) == documents.end()) documents.push_back(doc);
  }
  std::vector<int64_t> carrying;
  if (documents.size() < 2) return carrying;  // nothing left to resample without it
  for (const int64_t doc : documents) {
    LossUnits ra, rb;
    for (size_t i = 0; i < a.where.size(); ++i) {
      if (std::stoll(a.where[i].substr(0, a.where[i].find(':'))) == doc) continue;
      ra.nll.push_back(a.nll[i]), ra.count.push_back(a.count[i]), ra.where.push_back(a.where[i]);
      rb.nll.push_back(b.nll[i]), rb.count.push_back(b.count[i]), rb.where.push_back(b.where[i]);
    }
    const Interval without = paired_difference(ra, rb, resamples, seed).difference;
    const bool same_side = whole.lo > 0 ? without.lo > 0 : without.hi < 0;
    if (!same_side) carrying.push_back(doc);
  }
  return carrying;
}

WindowAgreement window_agreement(const LossUnits& a, const LossUnits& b) {
  if (a.where != b.where || a.count != b.count)
    throw std::invalid_argument("the two rows were not scored on the same windows");
  WindowAgreement out;
  for (const auto& units : units_by_window(a)) {
    double na = 0, nb = 0;
    for (size_t i : units) na += a.nll[i], nb += b.nll[i];
    ++out.windows;
    out.lower += na < nb;
    out.higher += na > nb;
  }
  return out;
}

Interval wilson_interval(double correct, int64_t trials) {
  const Proportion w = wilson(correct, trials);
  return {w.estimate, w.lo, w.hi};
}

}  // namespace segtrain::trainer
