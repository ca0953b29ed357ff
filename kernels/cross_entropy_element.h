#pragma once
// One row of cross-entropy over the vocabulary as the fused kernel computes it
// (cross_entropy_cuda.cu), shared with the host test that replays the kernel where no GPU
// is (tests/models/cross_entropy_test.cpp). Each thread folds its share of the row into a
// partial (largest logit so far, sum of exp(x - that)), the block merges the partials into
// the row's log-sum-exp: one read of the 16-bit row, no fp32 copy of it ("online softmax").
// Then nll = lse - x[target], and d nll / d x_j = exp(x_j - lse) - [j == target] (lse kept as
// max + log sum: SoftmaxRow).
#include <cmath>

#include "kernels/host_device.h"

namespace segtrain::kernels {

// A plain aggregate: it lives in the block reduction's shared memory.
struct SoftmaxPartial {
  float max;  // never NaN: a NaN logit fails every comparison and goes into the sum instead
  float sum;  // of exp(x - max) over the logits folded in
};

SEGTRAIN_HOST_DEVICE inline SoftmaxPartial softmax_partial_empty() { return {-INFINITY, 0.0f}; }

// Folds one logit in. A NaN logit makes the sum, so the row's loss, NaN (as log_softmax does:
// the trainer then skips the step); a -inf logit (a masked token) adds nothing, where
// exp(-inf - -inf) would be NaN.
SEGTRAIN_HOST_DEVICE inline SoftmaxPartial softmax_partial_add(SoftmaxPartial p, float x) {
  if (x > p.max) {
    p.sum = p.sum * expf(p.max - x) + 1.0f;  // rescaled to the new largest; 0 * 0 for the first
    p.max = x;
  } else if (!(x == -INFINITY)) {
    p.sum += expf(x - p.max);
  }
  return p;
}

// Two partials of disjoint parts of the row as one (associative and commutative up to
// rounding: the block merges in the order of its reduction tree).
SEGTRAIN_HOST_DEVICE inline SoftmaxPartial softmax_partial_merge(SoftmaxPartial a, SoftmaxPartial b) {
  if (b.max > a.max) {
    const SoftmaxPartial t = a;
    a = b;
    b = t;
  }
  // Nothing but -inf logits on b's side: its sum is 0, or NaN when a NaN was folded in, which must
  // reach the row's loss (a thread whose share of a short row is one NaN logit holds {-inf, NaN}).
  if (b.max == -INFINITY) {
    a.sum += b.sum;
    return a;
  }
  a.sum += b.sum * expf(b.max - a.max);
  return a;
}

// A row's log-sum-exp as max + log_sum, the two kept apart: x - max is exact for the logits
// near the largest (where softmax is not negligible) even far from 0, where x - lse would lose
// lse's rounding (at logits near 3,000, 2^-13) to every gradient.
struct SoftmaxRow {
  float max;
  float log_sum;
};

SEGTRAIN_HOST_DEVICE inline SoftmaxRow softmax_row(SoftmaxPartial p) { return {p.max, logf(p.sum)}; }

// -log softmax of the target's logit.
SEGTRAIN_HOST_DEVICE inline float cross_entropy_nll(float target_logit, SoftmaxRow r) {
  return r.log_sum - (target_logit - r.max);
}

// d nll / d x_j: softmax_j, less 1 at the target.
SEGTRAIN_HOST_DEVICE inline float cross_entropy_gradient(float x, SoftmaxRow r, bool is_target) {
  return expf((x - r.max) - r.log_sum) - (is_target ? 1.0f : 0.0f);
}

}  // namespace segtrain::kernels
