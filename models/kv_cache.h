#pragma once
// The keys and values of the tokens a model has already read, one pair a block, so
// that generation runs each new token through the blocks once
// (TransformerLM::decode). Keys are kept as their block rotated them: with dynamic
// NTK or LongRoPE, whose frequencies change as the sequence grows, a cached key keeps
// the frequencies of the step that read it, as transformers' cache does.
#include <ATen/ATen.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace segtrain::models {

struct KvLayer {
  at::Tensor keys, values;  // [B, H_kv, T_read, head_dim]; undefined before the first tokens

  // Appends the new tokens' keys and values [B, H_kv, T_new, head_dim]; returns every
  // key and value read so far.
  std::pair<at::Tensor, at::Tensor> append(const at::Tensor& k, const at::Tensor& v) {
    keys = keys.defined() ? at::cat({keys, k}, 2) : k;
    values = values.defined() ? at::cat({values, v}, 2) : v;
    return {keys, values};
  }
};

struct KvCache {
  std::vector<KvLayer> layers;  // one a block, made by the first decode
  at::Tensor positions;         // [B, T_read] the ids of the tokens read (ALiBi's bias is built from them)
  int64_t end = 0;              // the largest position id read + 1

  int64_t length() const { return positions.defined() ? positions.size(1) : 0; }
};

}  // namespace segtrain::models
