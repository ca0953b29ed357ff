#include "data/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"
#include "common/numbers.h"
#include "data/rng.h"
#include "data/sampler_rules.h"
#include "data/token_store.h"
#include "data/windows.h"

namespace segtrain::data {

int64_t sample_length(const DataConfig& c) {
  return c.sampler.method == SamplerMethod::full ? c.extended_length : c.train_length;
}

double compute_equivalent_epochs(const DataConfig& c) {
  if (c.sampler.method == SamplerMethod::full) return 1.0;
  return static_cast<double>(c.extended_length) / static_cast<double>(c.train_length);
}

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

Sampler::Sampler(const IndexedDataset& split, const Windows& windows, const DataConfig& c)
    : split_(&split),
      windows_(&windows),
      method_(c.sampler.method),
      targets_(c.sampler.targets),
      placement_(c.sampler.placement),
      lt_(c.train_length),
      le_(c.extended_length),
      length_(sample_length(c)) {
  throw_first(sampler_problems(c));  // data/sampler_rules.h: validated before, refused here too
  if (lt_ < 1) throw InputError("data.train_length: must be >= 1");
  if (windows.length != le_)
    throw InputError("windows were cut at " + std::to_string(windows.length) + " tokens, not L_e = " + std::to_string(le_));
  const int64_t segment = std::llround(c.sampler.alpha * static_cast<double>(lt_));
  if (method_ == SamplerMethod::chunk) {
    segments_ = std::llround(1.0 / c.sampler.alpha);
    segment_ = segment;
  } else if (method_ == SamplerMethod::prefix) {
    segment_ = segment;
  }
}

int64_t Sampler::window_doc(int64_t window) const { return (*windows_)[window].doc; }
int64_t Sampler::window_start(int64_t window) const { return (*windows_)[window].start; }

void Sampler::draw(int64_t window, uint64_t key, const SampleOut& out) const {
  Rng rng(key);
  const int64_t T = length_;
  int32_t* off = out.offsets;
  int32_t* pos = out.positions;
  uint8_t* mask = out.loss_mask;
  auto iota = [](int32_t* p, int64_t n, int64_t first) {
    for (int64_t j = 0; j < n; ++j) p[j] = static_cast<int32_t>(first + j);
  };
  bool positions_are_offsets = true;
  switch (method_) {
    case SamplerMethod::truncate:
    case SamplerMethod::full:
      iota(off, T, 0);
      break;
    case SamplerMethod::chunk: {
      // Placements of k runs of s tokens in L_e slots <-> k-subsets u of
      // [0, L_e - k*s + k): run m starts at u_m - m + m*s. Uniform subsets give
      // uniform placements.
      const int64_t k = segments_, s = segment_;
      if (placement_ == ChunkPlacement::uniform) {
        sample_sorted_distinct(rng, le_ - k * s + k, k, off);  // starts parked in off[0..k)
        for (int64_t m = k - 1; m >= 0; --m) {  // backwards: run m overwrites only starts >= m
          const int64_t start = off[m] - m + m * s;
          iota(off + m * s, s, start);
        }
        break;
      }
      // ring (data/sampler.h): run 0 at ring slot 0; runs 1..k-1 placed uniformly
      // in the L_e - s slots after it (the same bijection as above with k-1 runs,
      // shifted by s); then rotated by r. Each ring placement is reached from
      // exactly k (run 0, r) pairs, so ring placements are equally likely, and
      // rotation makes P(offset x covered) = L_t / L_e for every x.
      const int64_t r = static_cast<int64_t>(rng.below(static_cast<uint64_t>(le_)));
      sample_sorted_distinct(rng, le_ - k * s + k - 1, k - 1, off);  // parked in off[0..k-1)
      for (int64_t m = k - 1; m >= 1; --m) {  // run m reads off[m-1] and writes from m*s > m-1
        const int64_t start = off[m - 1] - (m - 1) + m * s;
        iota(off + m * s, s, start);
      }
      iota(off, s, 0);
      // Rotate: slots that pass L_e wrap to the front; they are a suffix of the
      // increasing ring slots, so moving it first keeps offsets increasing.
      int64_t wrap = T;
      for (int64_t j = T - 1; j >= 0 && off[j] + r >= le_; --j) wrap = j;
      for (int64_t j = 0; j < T; ++j) off[j] = static_cast<int32_t>(j < wrap ? off[j] + r : off[j] + r - le_);
      std::rotate(off, off + wrap, off + T);
      break;
    }
    case SamplerMethod::prefix: {
      const int64_t s = segment_, p = lt_ - s;
      const int64_t i = rng.between(p + 1, le_ - s - 1);
      sample_sorted_distinct(rng, i, p, off);
      iota(off + p, s, i);
      break;
    }
    case SamplerMethod::randompos:
    case SamplerMethod::pose: {
      const int64_t c = rng.between(0, le_ - lt_);
      iota(off, T, c);
      positions_are_offsets = false;
      if (method_ == SamplerMethod::randompos) {
        sample_sorted_distinct(rng, le_, lt_, pos);
      } else {
        const int64_t split = lt_ > 1 ? rng.between(1, lt_ - 1) : 1;
        const int64_t skip = rng.between(0, le_ - lt_);
        for (int64_t j = 0; j < T; ++j) pos[j] = static_cast<int32_t>(j < split ? j : j + skip);
      }
      break;
    }
  }
  if (positions_are_offsets) std::copy(off, off + T, pos);
  if (method_ == SamplerMethod::prefix) {
    const int64_t p = lt_ - segment_;
    std::fill(mask, mask + p, uint8_t{0});
    std::fill(mask + p, mask + T, uint8_t{1});
  } else {
    std::fill(mask, mask + T, uint8_t{1});
  }
  const Window& w = (*windows_)[window];
  if (split_->dtype() == TokenDtype::uint16) gather(split_->data<uint16_t>(w.doc) + w.start, out);
  else gather(split_->data<int32_t>(w.doc) + w.start, out);
}

// `doc` points at the window's first token; reads stay inside [0, L_e).
template <class T>
void Sampler::gather(const T* doc, const SampleOut& out) const {
  const int64_t n = length_;
  for (int64_t j = 0; j < n; ++j) out.tokens[j] = static_cast<int32_t>(doc[out.offsets[j]]);
  if (targets_ == TargetMode::sequence) {
    for (int64_t j = 0; j + 1 < n; ++j) out.targets[j] = out.tokens[j + 1];
  } else {
    for (int64_t j = 0; j + 1 < n; ++j) out.targets[j] = static_cast<int32_t>(doc[out.offsets[j] + 1]);
  }
  const int64_t after = int64_t{out.offsets[n - 1]} + 1;
  if (after < le_) {
    out.targets[n - 1] = static_cast<int32_t>(doc[after]);
  } else {
    out.targets[n - 1] = kNoTarget;
    out.loss_mask[n - 1] = 0;
  }
}

Sample Sampler::draw(int64_t window, uint64_t key) const {
  Sample s;
  const auto T = static_cast<size_t>(length_);
  s.doc = window_doc(window);
  s.window_start = window_start(window);
  s.tokens.resize(T);
  s.offsets.resize(T);
  s.positions.resize(T);
  s.targets.resize(T);
  s.loss_mask.resize(T);
  draw(window, key, {s.tokens.data(), s.offsets.data(), s.positions.data(), s.targets.data(), s.loss_mask.data()});
  return s;
}

}  // namespace segtrain::data
