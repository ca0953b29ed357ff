#pragma once
// Which tokenizer a store was made with, and which one a model learned: the same
// when both give the same ids to a probe text (prose, code, digits, accents, CJK,
// emoji) and have the same vocabulary size. Comparing behaviour, not files, lets a
// store made from a sentencepiece .model match the HF folder that holds it, and
// catches a store made with another tokenizer of the same size.
//
// A checkpoint keeps its store's identity (store_tokenizer.json, written by the
// trainer) so it can be checked after the store is gone.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/document_tokenizer.h"

namespace segtrain::data {

struct TokenizerIdentity {
  std::string kind;  // sentencepiece | hf-sentencepiece | hf-bpe
  int64_t vocab_size = 0;
  std::string probe;               // the text encoded
  std::vector<int32_t> probe_ids;  // its ids between BOS and EOS, as a document holds them
};

extern const char* const kTokenizerProbe;

TokenizerIdentity identity_of(const DocumentTokenizer& tokenizer, const std::string& probe = kTokenizerProbe);

// The tokenizer a store keeps (data/prompt_tokenizer.h); nullopt when its meta.json
// records none (a Megatron store made elsewhere).
std::optional<TokenizerIdentity> store_tokenizer_identity(const std::string& store_dir,
                                                          const std::string& probe = kTokenizerProbe);

// An HF folder's tokenizer (tokenizer.model or tokenizer.json); nullopt when it has neither.
std::optional<TokenizerIdentity> folder_tokenizer_identity(const std::string& dir);

// store_tokenizer.json: the identity and the store it was read from.
std::string identity_to_json(const TokenizerIdentity& identity, const std::string& store_dir);
// InputError naming `file` when it is not such a record.
TokenizerIdentity identity_from_json(const std::string& text, const std::string& file, std::string* store_dir = nullptr);

// "" when `a` and `b` are the same tokenizer; else what differs, in a few words
// ("vocabulary 1024 (sentencepiece) vs 49152 (hf-bpe)", "other ids for the same text").
std::string identity_difference(const TokenizerIdentity& a, const TokenizerIdentity& b);

}  // namespace segtrain::data
