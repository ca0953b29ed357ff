#pragma once
// Samplers (Karypis et al. 2024, 3.3 and 5.5): each turns one L_e window into the sequence
// the model sees. For input j, `offsets[j]` is where the token came from in the
// window and `positions[j]` is the position id the model gets:
//
//   truncate   the first L_t tokens; positions 0..L_t-1.
//   full       the whole window; positions 0..L_e-1.
//   chunk-a    1/a non-overlapping runs of a*L_t tokens, placed uniformly at
//              random in the window (every placement equally likely), in order;
//              positions = offsets. That is data.sampler.placement: uniform, the
//              paper's; it covers offsets near 0 and L_e - 1 far less often than
//              the middle (L_t 128, L_e 512: offset 0 in 1% of samples, 480 in 29.5%).
//              placement: ring closes the window into a ring of L_e slots: run 0
//              at slot 0, runs 1..1/a-1 placed uniformly (every placement equally
//              likely) in slots [a*L_t, L_e), then everything rotated by r uniform
//              in [0, L_e). Rotation makes every offset covered with probability
//              exactly L_t / L_e. Offsets are then listed in increasing order, so
//              the one run that crosses the end (offset L_e - 1 to 0), if any,
//              becomes two pieces: its head [0, h) first in the sequence and its
//              tail [L_e - (a*L_t - h), L_e) last; every other run stays a*L_t
//              contiguous tokens. positions = offsets.
//   prefix-a   suffix: a*L_t contiguous tokens from i, (1-a)L_t < i < L_e - a*L_t,
//              i uniform; prefix: (1-a)L_t distinct offsets drawn uniformly from
//              [0, i), increasing; positions = offsets; loss only on the suffix.
//   randompos  L_t contiguous tokens from a uniform start in [0, L_e - L_t];
//              positions: a sorted, distinct, uniform sample of [0, L_e) (RandomPos).
//   pose       the same tokens; PoSE position ids (Zhu et al. 2023) with two
//              chunks: split point l uniform in [1, L_t - 1], skip u uniform in
//              [0, L_e - L_t]; positions j for j < l and j + u after.
//
// Targets. `document`: the window token right after offsets[j]. `sequence`: the
// next input, tokens[j+1] (a discontinuity at each chunk boundary, as in the
// paper); for the last input both modes use the window token after it. A target
// never comes from beyond the window: when offsets[j] = L_e - 1 (the last input
// of `full`, or of randompos/pose drawn at the very end) the target is kNoTarget
// and loss_mask[j] = 0. For prefix the last prefix input's target (the first
// suffix token in `sequence` mode) is kept in `targets` but masked like the
// whole prefix, since the paper computes the loss on the suffix only.
#include <cstdint>
#include <vector>

#include "data/config.h"

namespace segtrain::data {

class IndexedDataset;
struct Windows;

inline constexpr int32_t kNoTarget = -100;  // PyTorch's default ignore_index

struct Sample {
  int64_t doc = 0;
  int64_t window_start = 0;
  std::vector<int32_t> tokens, offsets, positions, targets;
  std::vector<uint8_t> loss_mask;
};

// Where one sample is written: T entries each (the loader points these into a
// micro-batch, so drawing copies nothing).
struct SampleOut {
  int32_t* tokens;
  int32_t* offsets;
  int32_t* positions;
  int32_t* targets;
  uint8_t* loss_mask;
};

// Tokens per sample: L_e for full, L_t otherwise.
int64_t sample_length(const DataConfig& config);

// Seed 004 eq. 2: L_e / L_t epochs make a segmented run process as many tokens
// as one epoch of full-length training; full itself takes 1.
double compute_equivalent_epochs(const DataConfig& config);

class Sampler {
 public:
  // Throws InputError (naming data.* keys) if the lengths or alpha do not fit the
  // method; `windows` must have been cut with L_e = config.extended_length.
  // Both `split` and `windows` must outlive the sampler (it keeps pointers).
  Sampler(const IndexedDataset& split, const Windows& windows, const DataConfig& config);

  int64_t length() const { return length_; }
  // A pure function of (window, key).
  void draw(int64_t window, uint64_t key, const SampleOut& out) const;
  Sample draw(int64_t window, uint64_t key) const;
  int64_t window_doc(int64_t window) const;
  int64_t window_start(int64_t window) const;

 private:
  template <class T>
  void gather(const T* doc, const SampleOut& out) const;

  const IndexedDataset* split_;
  const Windows* windows_;
  SamplerMethod method_;
  TargetMode targets_;
  ChunkPlacement placement_;
  int64_t lt_, le_, length_;
  int64_t segments_ = 1, segment_ = 0;  // chunk: count and length; prefix: suffix length
};

// k distinct values from [0, n), increasing, uniformly among all k-subsets
// (Floyd's algorithm on a bitmap, O(k + n/64)). Exposed for tests.
class Rng;
void sample_sorted_distinct(Rng& rng, int64_t n, int64_t k, int32_t* out);

}  // namespace segtrain::data
