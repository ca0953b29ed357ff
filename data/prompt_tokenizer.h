#pragma once
// A store's own tokenizer, for prompts written to a model trained or evaluated on
// the store (passkey retrieval): opened from the store's meta.json and the tokenizer
// files `segtrain prepare` keeps in it (docs/architecture.md, "Token store"), so a
// prompt's text is encoded exactly as the store's documents were, whatever the
// tokenizer: a sentencepiece .model ("sentencepiece"), an HF folder's sentencepiece
// model ("hf-sentencepiece") or its byte-level BPE tokenizer.json ("hf-bpe").
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/document_tokenizer.h"

namespace segtrain::data {

class PromptTokenizer {
 public:
  // The ids of `text` as a store's document holds them between its BOS and EOS (no BOS, no EOS).
  std::vector<int32_t> encode(std::string_view text) const;
  // A prompt as the store's documents start: the BOS when they have one (bos_id()), then
  // the text's ids. Passkey's and RULER's prompts alike.
  std::vector<int32_t> encode_prompt(std::string_view text) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  // The BOS every document of the store starts with (meta.json add_bos), -1 when they do not.
  int32_t bos_id() const { return bos_id_; }
  // The EOS every document of the store ends with, -1 when the tokenizer has none.
  int32_t eos_id() const { return tokenizer_.eos_id; }
  int64_t vocab_size() const { return tokenizer_.vocab_size; }
  const std::string& kind() const { return tokenizer_.kind; }  // meta.json tokenizer_kind

 private:
  friend PromptTokenizer open_prompt_tokenizer(const std::string& store_dir);
  DocumentTokenizer tokenizer_;
  int32_t bos_id_ = -1;
};

// InputError (one line naming the store and the file) when the store records no
// tokenizer (a Megatron store made elsewhere), when a file meta.json names is not in
// the store, or when the kept tokenizer is not the one meta.json describes.
PromptTokenizer open_prompt_tokenizer(const std::string& store_dir);

}  // namespace segtrain::data
