#pragma once
// A sampler as one registration: its name (data.sampler.method and the experiment's
// method names), its rules with L_t and L_e, how it draws a sample, and how the sample
// dump and the report speak of it. Each sampler is a file of data/samplers/; the list is
// data/samplers/registry.cpp. Adding one: its file and its two lines there (its
// declaration and its place in the list), nothing else (docs/architecture.md).
// Plain C++, so the config library validates a sampler's keys without the readers.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/config_problem.h"
#include "data/config.h"

namespace segtrain::data {

class Rng;

// Where one sample is written: T entries each (the loader points these into a
// micro-batch, so drawing copies nothing).
struct SampleOut {
  int32_t* tokens;
  int32_t* offsets;
  int32_t* positions;
  int32_t* targets;
  uint8_t* loss_mask;
};

// What a draw reads besides its random numbers: L_t, L_e, the sample's length and the
// data.sampler section (alpha, placement, a sampler's own keys).
struct DrawSetting {
  int64_t train_length = 0, extended_length = 0, length = 0;
  SamplerConfig sampler;
};

struct SamplerKind {
  std::string_view name;
  // What it does, in a line: the schema's and the docs' list of methods.
  std::string_view summary;
  // The experiment names its rows "<name>-<alpha>" (chunk-0.25), else "<name>".
  bool named_with_alpha = false;
  // A sample is the whole L_e window (full), not L_t tokens.
  bool whole_window = false;
  // Its positions stay below L_t (truncate): it never trains a position past the base's.
  bool within_train_length = false;
  // data.sampler.placement applies (chunk).
  bool takes_placement = false;
  // data.sampler.sigma applies (cream).
  bool takes_sigma = false;
  // The report compares chunk-α against its row (Karypis et al.'s baselines, PoSE, CREAM).
  bool baseline = false;
  // A sampler whose row the report also compares this one's against ("pose" for cream); "" none.
  std::string_view compared_with;
  // Its own rules with L_t and L_e (after the shared ones: data/sampler_rules.h), added to `out`.
  void (*rules)(const DataConfig& config, std::vector<ConfigProblem>& out) = nullptr;
  // Its settings for the sample dump's header, after its name: " alpha 0.25, placement ring".
  std::string (*settings)(const SamplerConfig& sampler) = nullptr;
  // offsets, positions and loss_mask of one sample (length entries each); the Sampler then
  // gathers tokens and targets from the window.
  void (*draw)(const DrawSetting& setting, Rng& rng, const SampleOut& out) = nullptr;
};

// Every sampler, in the registry's order.
std::span<const SamplerKind* const> samplers();
// The sampler named `name`, or nullptr.
const SamplerKind* find_sampler(std::string_view name);
// data.sampler.method's sampler; InputError naming the key and the names when there is none.
const SamplerKind& sampler_kind(const SamplerConfig& sampler);
// The registered names: the values data.sampler.method takes.
std::vector<std::string> sampler_names();
// "truncate: the first L_t tokens ...; full: ...": every sampler and its summary, for the schema's doc.
std::string sampler_summaries();

}  // namespace segtrain::data
