#pragma once
// `segtrain inspect`: what a model does with positions, as JSON on stdout.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace segtrain::trainer {

struct InspectPositionsOptions {
  std::string model;   // a stored model, or
  std::string config;  // a run config whose model is resolved the way the trainer resolves it
  std::vector<std::string> overrides;
  int64_t length = 0;  // 0: the model's own (extended) length
};

// ALiBi `slopes`, RoPE `inv_freq` + `attention_scale`, or the APE table's rows
// (and the source positions they interpolate) in effect at the length.
std::string positions_json(const InspectPositionsOptions& options);

struct AlibiPrecisionOptions {
  int64_t heads = 32;
  std::optional<int64_t> head;  // one head; default: every head
  int64_t length = 8192;
  int64_t bucket = 1000;
};

// Distinct ALiBi bias values per bucket of positions in fp32, fp16 and bf16 (the ALiBi precision study, Table 2).
std::string alibi_precision_json(const AlibiPrecisionOptions& options);

}  // namespace segtrain::trainer
