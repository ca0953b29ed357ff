#pragma once
// `segtrain sample`: what the configured sampler feeds the model, one JSON
// object per sample (docs/architecture.md, "sample JSON line"), so a user can
// see the tokens, their offsets in the window and the position ids.
#include <cstdint>
#include <string>

#include "data/config.h"
#include "data/token_store.h"

namespace segtrain::data {

struct SampleDumpOptions {
  uint64_t seed = 1234;  // run.seed: the stream is a pure function of (seed, epoch, index)
  Split split = Split::train;
  int64_t count = 10;
  std::string out;  // .jsonl, written atomically
};

void write_sample_dump(const TokenStore& store, const DataConfig& config, const SampleDumpOptions& options);

}  // namespace segtrain::data
