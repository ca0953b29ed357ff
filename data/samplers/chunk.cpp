// chunk-α (Karypis et al. 2024, 3.3): 1/α non-overlapping runs of α·L_t tokens in the window,
// in order; positions = offsets. data.sampler.placement: uniform (every placement of the runs
// inside [0, L_e) equally likely, the paper's; it covers offsets near 0 and L_e - 1 far less
// often than the middle: L_t 128, L_e 512: offset 0 in 1% of samples, 480 in 29.5%) or ring
// (the window closed into a ring of L_e slots: run 0 at slot 0, runs 1..1/α-1 placed uniformly
// in slots [α·L_t, L_e), everything rotated by r uniform in [0, L_e), so every offset is covered
// with probability exactly L_t / L_e; offsets listed in increasing order, so the one run that
// crosses the end, if any, becomes its head [0, h) first and its tail last).
#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/numbers.h"
#include "data/rng.h"
#include "data/sampler_kind.h"
#include "data/samplers/draw_helpers.h"

namespace segtrain::data {

namespace {

void chunk_rules(const DataConfig& c, std::vector<ConfigProblem>& out) {
  const double alpha = c.sampler.alpha;
  const double segment = alpha * static_cast<double>(c.train_length);
  if (!is_integer(1.0 / alpha))
    out.push_back({"data.sampler.alpha", "chunk takes 1/alpha segments, but 1/" + format_double(alpha) + " = " +
                                             format_double(1.0 / alpha) + " is not an integer"});
  else if (!is_integer(segment) || std::round(segment) < 1)
    out.push_back({"data.sampler.alpha", "chunk segments have alpha * train_length = " + format_double(segment) +
                                             " tokens; that must be an integer >= 1"});
}

std::string chunk_settings(const SamplerConfig& s) {
  std::ostringstream out;
  out << " alpha " << s.alpha << ", placement " << enum_name(kChunkPlacements, s.placement);
  return out.str();
}

void chunk_draw(const DrawSetting& setting, Rng& rng, const SampleOut& out) {
  const int64_t le = setting.extended_length, T = setting.length;
  const int64_t k = std::llround(1.0 / setting.sampler.alpha);
  const int64_t s = std::llround(setting.sampler.alpha * static_cast<double>(setting.train_length));
  int32_t* off = out.offsets;
  if (setting.sampler.placement == ChunkPlacement::uniform) {
    // Placements of k runs of s tokens in L_e slots <-> k-subsets u of
    // [0, L_e - k*s + k): run m starts at u_m - m + m*s. Uniform subsets give
    // uniform placements.
    sample_sorted_distinct(rng, le - k * s + k, k, off);  // starts parked in off[0..k)
    for (int64_t m = k - 1; m >= 0; --m)                   // backwards: run m overwrites only starts >= m
      iota_from(off + m * s, s, off[m] - m + m * s);
  } else {
    // ring: run 0 at ring slot 0; runs 1..k-1 placed uniformly in the L_e - s slots after it
    // (the same bijection as above with k-1 runs, shifted by s); then rotated by r. Each ring
    // placement is reached from exactly k (run 0, r) pairs, so ring placements are equally
    // likely, and rotation makes P(offset x covered) = L_t / L_e for every x.
    const int64_t r = static_cast<int64_t>(rng.below(static_cast<uint64_t>(le)));
    sample_sorted_distinct(rng, le - k * s + k - 1, k - 1, off);  // parked in off[0..k-1)
    for (int64_t m = k - 1; m >= 1; --m)  // run m reads off[m-1] and writes from m*s > m-1
      iota_from(off + m * s, s, off[m - 1] - (m - 1) + m * s);
    iota_from(off, s, 0);
    // Rotate: slots that pass L_e wrap to the front; they are a suffix of the
    // increasing ring slots, so moving it first keeps offsets increasing.
    int64_t wrap = T;
    for (int64_t j = T - 1; j >= 0 && off[j] + r >= le; --j) wrap = j;
    for (int64_t j = 0; j < T; ++j) off[j] = static_cast<int32_t>(j < wrap ? off[j] + r : off[j] + r - le);
    std::rotate(off, off + wrap, off + T);
  }
  positions_are_offsets(T, off, out.positions, out.loss_mask);
}

}  // namespace

extern const SamplerKind kChunkSampler{
    .name = "chunk",
    .summary = "1/alpha runs of alpha*L_t tokens placed in the window, positions = offsets",
    .named_with_alpha = true,
    .takes_placement = true,
    .compared_with = {},
    .rules = chunk_rules,
    .settings = chunk_settings,
    .draw = chunk_draw};

}  // namespace segtrain::data
