#pragma once
// The token store (docs/architecture.md, "Token store"): one Megatron-LM indexed dataset,
// version 1, per split (`train.{bin,idx}`, `valid.{bin,idx}`) plus `meta.json`.
//
// .idx layout (little endian): magic "MMIDIDX\0\0", u64 version = 1, u8 dtype code
// (8 = uint16, 4 = int32), u64 sequence count S, u64 document-index count D,
// i32 sizes[S], i64 byte pointers[S] into .bin, i64 document_indices[D].
// document_indices[d]..document_indices[d+1] are the sequences of document d, so
// a Megatron store made with --split-sentences (several sequences per document)
// is read as whole documents; ours write one sequence per document.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace segtrain::data {

enum class TokenDtype : uint8_t { int32 = 4, uint16 = 8 };
inline constexpr int64_t kUint16VocabLimit = 65500;  // Megatron's threshold for uint16
TokenDtype dtype_for_vocab(int64_t vocab_size);
int64_t dtype_bytes(TokenDtype dtype);
const char* dtype_name(TokenDtype dtype);

class MappedFile;

// One split, read through mmap. Opening validates everything a reader relies on
// and throws InputError("<file>: <fault>") otherwise; after that, document
// access is unchecked and free of copies.
class IndexedDataset {
 public:
  // `prefix` names `prefix.bin` and `prefix.idx`. vocab_size > 0 also checks that
  // every token id is in [0, vocab_size).
  static IndexedDataset open(const std::string& prefix, int64_t vocab_size);

  IndexedDataset();
  IndexedDataset(IndexedDataset&&) noexcept;
  IndexedDataset& operator=(IndexedDataset&&) noexcept;
  ~IndexedDataset();

  int64_t documents() const { return static_cast<int64_t>(doc_length_.size()); }
  int64_t tokens() const { return total_tokens_; }
  TokenDtype dtype() const { return dtype_; }
  int64_t length(int64_t doc) const { return doc_length_[static_cast<size_t>(doc)]; }
  int32_t max_token() const { return max_token_; }
  const std::string& prefix() const { return prefix_; }

  // Typed pointer to the first token of `doc`; T must match dtype().
  template <class T>
  const T* data(int64_t doc) const {
    return reinterpret_cast<const T*>(base_) + doc_begin_[static_cast<size_t>(doc)];
  }
  int32_t token(int64_t doc, int64_t i) const {
    return dtype_ == TokenDtype::uint16 ? data<uint16_t>(doc)[i] : data<int32_t>(doc)[i];
  }
  // tokens [start, start + count) of `doc` as int32.
  void copy(int64_t doc, int64_t start, int64_t count, int32_t* out) const;
  std::vector<int32_t> document(int64_t doc) const;

 private:
  std::string prefix_;
  std::unique_ptr<MappedFile> bin_;
  const unsigned char* base_ = nullptr;
  TokenDtype dtype_ = TokenDtype::uint16;
  std::vector<int64_t> doc_begin_;   // in tokens from the start of .bin
  std::vector<int64_t> doc_length_;  // in tokens
  int64_t total_tokens_ = 0;
  int32_t max_token_ = -1;
};

// Writes one split: documents stream into a temporary .bin; finish() writes the
// .idx and renames both into place (.bin first, so a visible .idx always has its data).
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(const std::string& prefix, TokenDtype dtype);
  ~IndexedDatasetWriter();
  void add_document(std::span<const int32_t> tokens);
  void finish();
  int64_t documents() const { return static_cast<int64_t>(sizes_.size()); }
  int64_t tokens() const { return tokens_; }

 private:
  struct Impl;
  std::string prefix_;
  TokenDtype dtype_;
  std::unique_ptr<Impl> impl_;
  std::vector<int32_t> sizes_;
  std::vector<int64_t> pointers_;
  std::vector<uint16_t> narrow_;
  int64_t tokens_ = 0;
  int64_t bytes_ = 0;
};

struct StoreMeta {
  int64_t vocab_size = 0;
  std::string tokenizer;  // "tokenizer.model", "hf:<tokenizer.json name>", or "megatron"
  int64_t eos_id = -1;    // -1: unknown (a Megatron store without a tokenizer)
  int64_t bos_id = -1;    // the tokenizer's BOS, -1: none
  bool add_bos = false;   // every document starts with bos_id
  std::string tokenizer_kind;  // "sentencepiece", "hf-sentencepiece", "hf-bpe", or "" (unknown)
  TokenDtype dtype = TokenDtype::uint16;
  int64_t documents = 0, tokens = 0;
  int64_t train_documents = 0, train_tokens = 0;
  int64_t valid_documents = 0, valid_tokens = 0;
  double valid_fraction = 0;
  int64_t seed = 0;
};

enum class Split { train, valid };
Split parse_split(const std::string& name);  // "train" | "valid", else InputError
const char* split_name(Split split);

// A store directory: meta.json and both splits, validated on open.
class TokenStore {
 public:
  static TokenStore open(const std::string& dir);
  const StoreMeta& meta() const { return meta_; }
  int64_t vocab_size() const { return meta_.vocab_size; }
  int64_t eos_id() const { return meta_.eos_id; }
  const IndexedDataset& split(Split s) const { return s == Split::train ? train_ : valid_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  StoreMeta meta_;
  IndexedDataset train_, valid_;
};

StoreMeta read_meta(const std::string& dir);
std::string meta_json(const StoreMeta& meta);

// Which documents go to the valid split: the round(fraction * n) documents with
// the smallest splitmix64(seed, index) keys (at least one when fraction > 0 and
// n >= 2; never all). Deterministic by seed, independent of the order of the
// work; scripts/pretokenize_hf.py implements the same rule.
std::vector<uint8_t> choose_valid_documents(int64_t documents, double fraction, uint64_t seed);

// Files a store keeps beside its splits (its tokenizer's): (name in the store, bytes).
using StoreFiles = std::vector<std::pair<std::string, std::string>>;

// Writes a whole store atomically: each split via a temporary sibling while the documents
// come, then, once every document is written, the splits, `files` and meta.json last (a store
// without meta.json is incomplete). A store already in `dir` stays whole until then: an error
// or an interruption (Interrupted from `document`) leaves it as it was, and no temporary file.
// `document(i)` yields doc i. Fills in dtype, counts, fraction and seed of `meta` and returns it.
StoreMeta write_store(const std::string& dir, int64_t documents,
                      const std::function<std::span<const int32_t>(int64_t)>& document, StoreMeta meta,
                      double valid_fraction, uint64_t seed, const StoreFiles& files = {});

}  // namespace segtrain::data
