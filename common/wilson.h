#pragma once
// Wilson's 95% score interval of a proportion: the interval every accuracy by
// length is reported with (the eval JSON, results.md). Torch-free.
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace segtrain {

inline constexpr double kZ95 = 1.959963984540054;

struct Proportion {
  double estimate = 0, lo = 0, hi = 0;
};

// `successes` of `trials`; a fractional count (a task scored by the share of
// needles found) is read as that many successes. estimate = successes / trials;
// NaN with [0, 1] when there were no trials.
inline Proportion wilson(double successes, int64_t trials) {
  if (trials <= 0) return {std::nan(""), 0, 1};
  const double n = static_cast<double>(trials), p = successes / n, z2 = kZ95 * kZ95;
  const double denominator = 1 + z2 / n;
  const double center = (p + z2 / (2 * n)) / denominator;
  const double half = kZ95 * std::sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denominator;
  return {p, std::max(0.0, center - half), std::min(1.0, center + half)};
}

}  // namespace segtrain
