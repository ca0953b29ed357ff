#include "data/samplers/draw_helpers.h"

#include <algorithm>
#include <vector>

#include "data/rng.h"

namespace segtrain::data {

void sample_sorted_distinct(Rng& rng, int64_t n, int64_t k, int32_t* out) {
  thread_local std::vector<uint64_t> bits;
  const size_t words = static_cast<size_t>((n + 63) / 64);
  bits.assign(words, 0);
  auto test_and_set = [&](uint64_t v) {
    uint64_t& w = bits[v >> 6];
    const uint64_t m = uint64_t{1} << (v & 63);
    const bool was = (w & m) != 0;
    w |= m;
    return was;
  };
  // Floyd: for j = n-k .. n-1 pick t in [0, j]; take t, or j if t is taken.
  for (int64_t j = n - k; j < n; ++j) {
    const uint64_t t = rng.below(static_cast<uint64_t>(j) + 1);
    if (test_and_set(t)) test_and_set(static_cast<uint64_t>(j));
  }
  int64_t m = 0;
  for (size_t w = 0; w < words; ++w)
    for (uint64_t word = bits[w]; word; word &= word - 1)
      out[m++] = static_cast<int32_t>(static_cast<int64_t>(w * 64) + __builtin_ctzll(word));
}

void positions_are_offsets(int64_t n, int32_t* offsets, int32_t* positions, uint8_t* loss_mask) {
  std::copy(offsets, offsets + n, positions);
  std::fill(loss_mask, loss_mask + n, uint8_t{1});
}

}  // namespace segtrain::data
