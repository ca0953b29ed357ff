#pragma once
// The Sampler turns one L_e window into the sequence the model sees, with the registered
// sampler data.sampler.method names (data/sampler_kind.h; each is a file of data/samplers/
// that says what it draws). For input j, `offsets[j]` is where the token came from in the
// window and `positions[j]` is the position id the model gets.
//
// Targets. `document`: the window token right after offsets[j]. `sequence`: the
// next input, tokens[j+1] (a discontinuity at each chunk boundary, as in the
// paper); for the last input both modes use the window token after it. A target
// never comes from beyond the window: when offsets[j] = L_e - 1 (the last input
// of `full`, or of randompos/pose drawn at the very end) the target is kNoTarget
// and loss_mask[j] = 0.
#include <cstdint>
#include <vector>

#include "data/config.h"
#include "data/sampler_kind.h"
#include "data/samplers/draw_helpers.h"

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

// Tokens per sample: L_e for full, L_t otherwise.
int64_t sample_length(const DataConfig& config);

// Karypis et al. 2024, eq. 2: L_e / L_t epochs make a segmented run process as many tokens
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
  const SamplerKind* kind_;
  TargetMode targets_;
  DrawSetting setting_;
  int64_t le_, length_;
};

}  // namespace segtrain::data
