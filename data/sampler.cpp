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
  return sampler_kind(c.sampler).whole_window ? c.extended_length : c.train_length;
}

double compute_equivalent_epochs(const DataConfig& c) {
  if (sampler_kind(c.sampler).whole_window) return 1.0;
  return static_cast<double>(c.extended_length) / static_cast<double>(c.train_length);
}

Sampler::Sampler(const IndexedDataset& split, const Windows& windows, const DataConfig& c)
    : split_(&split),
      windows_(&windows),
      kind_(&sampler_kind(c.sampler)),
      targets_(c.sampler.targets),
      setting_{c.train_length, c.extended_length, sample_length(c), c.sampler},
      le_(c.extended_length),
      length_(sample_length(c)) {
  throw_first(sampler_problems(c));  // data/sampler_rules.h: validated before, refused here too
  if (c.train_length < 1) throw InputError("data.train_length: must be >= 1");
  if (windows.length != le_)
    throw InputError("windows were cut at " + std::to_string(windows.length) + " tokens, not L_e = " + std::to_string(le_));
}

int64_t Sampler::window_doc(int64_t window) const { return (*windows_)[window].doc; }
int64_t Sampler::window_start(int64_t window) const { return (*windows_)[window].start; }

void Sampler::draw(int64_t window, uint64_t key, const SampleOut& out) const {
  Rng rng(key);
  kind_->draw(setting_, rng, out);
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
