#pragma once
// The data section of a run config (docs/architecture.md, "Config keys"): which store to read
// and how L_t-long training samples are cut from L_e-long windows (Karypis et al. 2024, 3.3).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/enum_names.h"

namespace segtrain::data {

// Label of input j: the next token of the constructed sequence (the paper's choice,
// with a discontinuity at each segment boundary) or the true next document token.
enum class TargetMode { sequence, document };
inline constexpr EnumName<TargetMode> kTargetModes[] = {{"sequence", TargetMode::sequence},
                                                        {"document", TargetMode::document}};

// Where chunk puts its runs in the window. uniform: every placement of the runs
// inside [0, L_e) equally likely (Karypis et al. 2024, 3.3); offsets near 0 and L_e - 1 are
// then covered far less often than the middle. ring: every placement on the window
// closed into a ring equally likely, rotated uniformly, so every offset is covered
// with probability exactly L_t / L_e; the run that crosses the end, if any, comes
// back as two pieces (data/sampler.h).
enum class ChunkPlacement { uniform, ring };
inline constexpr EnumName<ChunkPlacement> kChunkPlacements[] = {{"uniform", ChunkPlacement::uniform},
                                                                {"ring", ChunkPlacement::ring}};

struct SamplerConfig {
  std::string method = "truncate";  // a registered sampler's name (data/sampler_kind.h)
  double alpha = 0.25;
  TargetMode targets = TargetMode::sequence;
  ChunkPlacement placement = ChunkPlacement::uniform;  // chunk only
  double sigma = 3.0;  // cream only: the spread of its Gaussian, in L_t/2 (the reference's sigma)
};

// One source of a mixture (data.mixture[i]): a store, its share of the samples, and how its
// samples are cut when that differs from the data section's (data/mixture.h resolves them).
struct DataSource {
  std::string name;   // in logs, metrics.jsonl and trainer_state.json; empty: the store folder's name
  std::string store;  // empty: data.store
  double weight = 1;  // its expected share of the samples is weight / (sum of the weights)
  std::optional<int64_t> extended_length;  // its L_e; unset: data.extended_length
  std::optional<SamplerConfig> sampler;    // its sampler; unset: data.sampler
};

struct DataConfig {
  std::string store;              // directory written by `segtrain prepare`
  int64_t train_length = 256;     // L_t
  int64_t extended_length = 1024; // L_e
  SamplerConfig sampler;
  int64_t prefetch = 4;           // batches prepared ahead on the loader thread
  bool allow_tokenizer_mismatch = false;  // train on a store made with another tokenizer than the base's
  std::vector<DataSource> mixture;        // empty: every sample comes from `store`
};

}  // namespace segtrain::data
