#pragma once
// Small numeric predicates shared by the config validator and the samplers, so
// "is alpha * L_t a whole number of tokens" has one answer everywhere.
#include <cmath>

namespace segtrain {

// True when x is a whole number up to floating-point noise (0.25 * 128 = 32).
inline bool is_integer(double x) { return std::fabs(x - std::round(x)) < 1e-9; }

}  // namespace segtrain
