#pragma once
// The keys and values of the tokens a model has already read, one pair a block, so
// that generation runs each new token through the blocks once
// (TransformerLM::decode). Keys are kept as their block rotated them: with dynamic
// NTK or LongRoPE, whose frequencies change as the sequence grows, a cached key keeps
// the frequencies of the step that read it, as transformers' cache does.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace segtrain::models {

struct KvLayer {
  // [B, H_kv, capacity, head_dim]; the first `length` positions hold what was read. Undefined
  // before the first tokens. Growing by doubling (or to `reserved` at once) makes appending one
  // token a step O(1) copies amortised, where concatenating copied the whole cache every step
  // (about 750 MB a step for SmolLM2 at 16k tokens).
  at::Tensor key_storage, value_storage;
  int64_t length = 0;
  int64_t reserved = 0;  // the capacity to take at the first growth (KvCache::reserved_tokens)

  // Appends the new tokens' keys and values [B, H_kv, T_new, head_dim]; returns every
  // key and value read so far (views of the storage).
  std::pair<at::Tensor, at::Tensor> append(const at::Tensor& k, const at::Tensor& v) {
    const int64_t need = length + k.size(2);
    if (!key_storage.defined() || need > key_storage.size(2)) {
      const int64_t capacity =
          std::max({need, reserved, key_storage.defined() ? 2 * key_storage.size(2) : int64_t{0}});
      key_storage = grown(key_storage, k, capacity);
      value_storage = grown(value_storage, v, capacity);
    }
    key_storage.narrow(2, length, k.size(2)).copy_(k);
    value_storage.narrow(2, length, v.size(2)).copy_(v);
    length = need;
    return {key_storage.narrow(2, 0, length), value_storage.narrow(2, 0, length)};
  }

 private:
  at::Tensor grown(const at::Tensor& old, const at::Tensor& like, int64_t capacity) const {
    auto storage = at::empty({like.size(0), like.size(1), capacity, like.size(3)}, like.options());
    if (length > 0) storage.narrow(2, 0, length).copy_(old.narrow(2, 0, length));
    return storage;
  }
};

struct KvCache {
  std::vector<KvLayer> layers;  // one a block, made by the first decode
  int64_t reserved_tokens = 0;  // prompt + new tokens when known: each layer's storage is taken once
  at::Tensor positions;         // [B, T_read] the ids of the tokens read (ALiBi's bias is built from them)
  int64_t end = 0;              // the largest position id read + 1

  int64_t length() const { return positions.defined() ? positions.size(1) : 0; }
};

}  // namespace segtrain::models
