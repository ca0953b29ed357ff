#pragma once
// `segtrain sample`: what the configured sampler feeds the model, one JSON
// object per sample (docs/architecture.md, "sample JSON line"), so a user can
// see the tokens, their offsets in the window and the position ids; and, with
// --coverage, how often each offset of the window is fed (any method).
#include <cstdint>
#include <string>
#include <vector>

#include "data/config.h"
#include "data/loader.h"
#include "data/token_store.h"

namespace segtrain::data {

struct SampleDumpOptions {
  uint64_t seed = 1234;  // run.seed: the stream is a pure function of (seed, epoch, index)
  Split split = Split::train;
  int64_t count = 10;
  std::string out;  // .jsonl, written atomically
};

// The stream's first options.count samples, each line with "source" (its name) in a mixture.
void write_sample_dump(const std::vector<LoaderSource>& sources, const DataConfig& config,
                       const SampleDumpOptions& options);

// How often each offset of the L_e window, and each position id, is an input,
// over the first `samples` samples of the loader's stream (sample i is index
// i mod N of epoch i / N, as `segtrain sample` writes them).
struct Coverage {
  int64_t samples = 0;
  std::vector<int64_t> offsets;    // [L_e]: samples with offset x among their inputs
  std::vector<int64_t> positions;  // [L_e]: samples with position id x among their inputs
};
Coverage measure_coverage(const Loader& loader, int64_t extended_length, int64_t samples);

// The statistics `segtrain sample --coverage` prints: min / mean / max of the
// covered fraction with the offsets where they occur, the offsets furthest
// below and above the mean, and the profile in 16 buckets; position ids too
// when they differ from the offsets (randompos, pose).
std::string describe_coverage(const Coverage& coverage, const DataConfig& config);

// Measures options.count samples of each source's stream and returns describe_coverage's text
// (one block a source of a mixture, named by its key).
std::string sample_coverage(const std::vector<LoaderSource>& sources, const DataConfig& config,
                            const SampleDumpOptions& options);

}  // namespace segtrain::data
