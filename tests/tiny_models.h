#pragma once
// The tiny models the suites build, in one place: torch-free (models/spec/config.h only),
// so any suite may include it.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/spec/config.h"
#include "models/spec/converters/lora_config.h"

namespace segtrain::test {

// A 2-layer, 4-head model of `arch`: d_model 32, d_ff 64, `vocab` tokens and
// `positions` positions. With `grouped_kv`, llama has 2 key/value heads for its 4
// (grouped-query attention); the other architectures have no such key. A suite that
// wants another width sets it on the result.
inline models::ModelConfig tiny_model_config(models::Arch arch, int64_t vocab, int64_t positions,
                                             bool grouped_kv = false) {
  models::ModelConfig c;
  c.arch = arch;
  c.vocab_size = vocab;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.d_ff = 64;
  c.max_positions = positions;
  if (grouped_kv && arch == models::Arch::llama) c.n_kv_heads = 2;
  return c;
}

// `lora` with `trainable` (train.trainable's groups) training besides its adapters.
inline models::LoraConfig lora_training(models::LoraConfig lora, std::vector<std::string> trainable) {
  lora.trainable = std::move(trainable);
  return lora;
}

}  // namespace segtrain::test
