#pragma once
// CREAM (Wu et al., NeurIPS 2024; the reference: github.com/bigai-nlco/CREAM, src/train.py,
// CREAM() at lines 188-237, commit 1d15c73): an L_t-long sample of head, middle and tail
// segments whose tokens keep their positions in the L_e window. Exposed with its draws
// explicit so tests/data/cream_test.cpp checks it against tests/data/cream_reference.py, the
// reference's rule in Python, for the same draws.
#include <cstdint>

namespace segtrain::data {

// What one sample draws, in the order the reference draws them.
struct CreamDraws {
  int64_t rand_num = 0;         // 0: relativity (head = tail = L_t // 3); 1: continuity (4 * factor)
  double uniform_random = 0.5;  // in [0, 1): the middle's scale through the Gaussian's inverse CDF
  int64_t end_id_offset = 0;    // in [0, hi - lo]: where the middle ends within its range
};

struct CreamLayout {
  int64_t factor = 0, head_len = 0, tail_len = 0, len_chunk = 0, rand_factor = 0;
  int64_t end_id_lo = 0, end_id_hi = 0, end_id = 0;
};

// train.py:196-205 and :214-219 for L_t, L_e (a multiple of L_t) and sigma: the segment
// lengths, rand_factor = int(np.interp(u, cdf, x)) over the reference's 1000-point table, and
// the middle's last position lo + end_id_offset (end_id_offset is clamped into [0, hi - lo]).
CreamLayout cream_layout(int64_t train_length, int64_t extended_length, double sigma, const CreamDraws& draws);

// Positions (= window offsets) of the sample, L_t of them: head [0, head_len), middle
// [end_id - len_chunk + 1, end_id], tail [factor L_t - tail_len, factor L_t).
void cream_positions(const CreamLayout& layout, int64_t train_length, int32_t* positions);

}  // namespace segtrain::data
