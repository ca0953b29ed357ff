#pragma once
// What several samplers' draws share (data/samplers/).
#include <cstdint>

namespace segtrain::data {

class Rng;

// p[j] = first + j for j in [0, n).
inline void iota_from(int32_t* p, int64_t n, int64_t first) {
  for (int64_t j = 0; j < n; ++j) p[j] = static_cast<int32_t>(first + j);
}

// k distinct values from [0, n), increasing, uniformly among all k-subsets
// (Floyd's algorithm on a bitmap, O(k + n/64)).
void sample_sorted_distinct(Rng& rng, int64_t n, int64_t k, int32_t* out);

// Positions equal offsets and every prediction counts: what most samplers finish with.
void positions_are_offsets(int64_t n, int32_t* offsets, int32_t* positions, uint8_t* loss_mask);

}  // namespace segtrain::data
