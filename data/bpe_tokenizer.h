#pragma once
// A Hugging Face tokenizer.json's byte-level BPE (GPT-2, Pythia, Llama 3, Qwen2),
// encoded natively with the same ids as the `tokenizers` library, and the
// tokenizer.json frame (post-processor, added tokens) that a sentencepiece folder's
// conversion carries too. Which tokenizer a folder uses, and what a stored document
// is: data/document_tokenizer.h.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace segtrain::data {

struct BpeDecoder;  // data/bpe_decoder.h

// tokenizer.json of a byte-level BPE. Supported: model BPE (merges as "a b" or
// ["a", "b"], ignore_merges, unk_token, byte_fallback); normalizer null, NFC, NFD,
// NFKC, NFKD or a Sequence of them; pre_tokenizer ByteLevel (its GPT-2 regex when
// use_regex), Split (Regex or String pattern; Isolated, Removed, MergedWithPrevious,
// MergedWithNext) or a Sequence of them with a ByteLevel; post_processor null,
// ByteLevel, TemplateProcessing, RobertaProcessing, BertProcessing or a Sequence;
// added tokens matched literally (leftmost-longest, lstrip/rstrip) before the
// normalizer and pre-tokenizer, as `tokenizers` does. Anything else is an
// InputError naming the file and the field.
class BpeTokenizer {
 public:
  static BpeTokenizer load(const std::string& tokenizer_json);
  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;
  ~BpeTokenizer();

  int64_t vocab_size() const;  // largest id (model vocabulary or added token) + 1
  std::optional<int32_t> token_id(std::string_view token) const;
  // Appends the ids of `text` as `tokenizers`' encode(text, add_special_tokens=False). Thread-safe.
  void encode(std::string_view text, std::vector<int32_t>& out) const;
  // The post-processor's special tokens around a single sequence (Llama 3: BOS first).
  const std::vector<int32_t>& prefix() const;
  const std::vector<int32_t>& suffix() const;
  // ids -> UTF-8 text as `tokenizers`' decode(ids, skip_special_tokens=False) with the
  // file's decoder (data/bpe_decoder.h: ByteLevel, ByteFallback, Fuse). Thread-safe.
  std::string decode(const std::vector<int32_t>& ids) const;

 private:
  friend class TokenizerFrame;  // shares the post-processor and added-token code
  struct Impl;                  // bpe_tokenizer.cpp's alone
  BpeTokenizer();
  std::unique_ptr<Impl> impl_;
  std::shared_ptr<const BpeDecoder> decoder_;  // bpe_decoder.cpp's
};

// What a tokenizer.json puts around and into a text whatever its model: the
// post-processor's special tokens around a single sequence and the added tokens,
// matched in the text before anything else. BpeTokenizer has one of its own; a
// sentencepiece folder's tokenizer.json (transformers' conversion of the model) is
// read as one around sentencepiece (data/document_tokenizer.h).
class TokenizerFrame {
 public:
  // InputError naming the file and field for a bad post_processor or added token,
  // or an id outside `vocab_size` (the vocabulary of `vocabulary`, for the message).
  static TokenizerFrame load(const std::string& tokenizer_json, int64_t vocab_size, const std::string& vocabulary);
  const std::vector<int32_t>& prefix() const;
  const std::vector<int32_t>& suffix() const;
  struct Part {
    std::string text;
    int32_t token = -1;  // an added token's id, else -1: text for the model to encode
  };
  // `text` cut at its added tokens (leftmost-longest, lstrip/rstrip), in order.
  std::vector<Part> split_added(std::string_view text) const;

 private:
  std::shared_ptr<const BpeTokenizer::Impl> impl_;
};

}  // namespace segtrain::data
