#pragma once
// A base's own tokenizer for `segtrain prepare --tokenizer DIR` (docs/architecture.md,
// "Token store"): a Hugging Face folder's tokenizer.json when it is a byte-level BPE
// (data/bpe_tokenizer.h), or its sentencepiece tokenizer.model (Llama 2, Mistral).
//
// Which one a folder uses: tokenizer.model when it is a sentencepiece model (the
// tokenizer the base was trained with; HF's tokenizer.json beside it is a
// conversion of it), else tokenizer.json. With both, sentencepiece encodes as
// transformers does with the folder: tokenizer.json's post-processor and added
// tokens, and the leading "▁" where transformers 5 puts it (LlamaTokenizer:
// add_prefix_space and legacy from tokenizer_config.json; others: the file's
// Metaspace prepend_scheme or Prepend normalizer). A document is stored as the ids
// transformers gives for `tok(text).input_ids` (so BOS first where the folder adds
// one), followed by EOS unless those ids already end with it.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace segtrain::data {

// The tokenizer a store is made with, given as `--tokenizer PATH`: a sentencepiece
// .model file (documents end with its EOS, no BOS, as before) or an HF folder.
struct DocumentTokenizer {
  std::string kind;          // "sentencepiece" | "hf-sentencepiece" | "hf-bpe"
  std::string meta_name;     // meta.json "tokenizer": "tokenizer.model" or "hf:tokenizer.json"
  int64_t vocab_size = 0;
  int32_t bos_id = -1, eos_id = -1;  // the folder's (tokenizer_config.json), -1: none
  bool add_bos = false;               // every document starts with bos_id (tok(text) adds it)
  // One document's ids: [BOS] text ids EOS. Thread-safe.
  std::function<void(std::string_view, std::vector<int32_t>&)> encode;
  // Appends the ids of `text` alone, as a document holds them between its BOS and EOS
  // (`tok(text, add_special_tokens=False)`). Thread-safe.
  std::function<void(std::string_view, std::vector<int32_t>&)> encode_text;
  // ids -> text: sentencepiece's decode, or tokenizer.json's decoder (BpeTokenizer::decode).
  std::function<std::string(const std::vector<int32_t>&)> decode;
  // Files the store keeps a copy of: (name in the store, bytes).
  std::vector<std::pair<std::string, std::string>> files;
};

// InputError (one line naming the file and field) for a folder with neither
// tokenizer.model nor tokenizer.json, or with an unsupported tokenizer.json.
DocumentTokenizer open_document_tokenizer(const std::string& path);

}  // namespace segtrain::data
