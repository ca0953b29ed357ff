#pragma once
// sentencepiece: train a model on documents or load one, and encode documents
// in parallel with an EOS after each (so a model learns where documents end and
// windows never need a separator of their own).
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace segtrain::data {

struct TokenizerTrainOptions {
  int64_t vocab_size = 4096;
  std::string model_type = "unigram";  // unigram | bpe
  double character_coverage = 0.9995;
  int64_t sample_size = 2000000;       // sentences sampled for training
  uint64_t seed = 1234;
  int64_t threads = 0;                 // 0: all cores
};

struct EncodeStats {
  int64_t documents = 0, bytes = 0, tokens = 0, threads = 0;
  double seconds = 0;
  double mb_per_s() const { return seconds > 0 ? static_cast<double>(bytes) / 1e6 / seconds : 0; }
};

class Tokenizer {
 public:
  static Tokenizer load(const std::string& model_path);  // InputError if missing or not a model
  // A model from its serialized bytes; `name` is the file named in errors.
  static Tokenizer from_serialized(std::string proto, const std::string& name);
  static Tokenizer train(const std::vector<std::string>& documents, const TokenizerTrainOptions& options);
  // The same from documents streamed by `next_document` (false after the last), read once:
  // sentencepiece samples options.sample_size lines of them as it reads (input_sentence_size),
  // so memory holds the sample, not the corpus.
  static Tokenizer train(const std::function<bool(std::string&)>& next_document, const TokenizerTrainOptions& options);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  int64_t vocab_size() const;
  int32_t eos_id() const;
  int32_t bos_id() const;                           // -1 when the model has none
  int32_t piece_id(std::string_view piece) const;  // -1 when `piece` is not in the vocabulary
  const std::string& serialized() const { return proto_; }  // the .model file's bytes

  // Token ids of `text`, then EOS. Thread-safe.
  void encode(std::string_view text, std::vector<int32_t>& out) const;
  // Appends the token ids of `text` alone (no EOS). Thread-safe.
  void encode_ids(std::string_view text, std::vector<int32_t>& out) const;
  std::string decode(const std::vector<int32_t>& ids) const;

 private:
  Tokenizer();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string proto_;
};

// One vector per document, EOS-terminated; documents are spread over `threads`
// std::threads (0: all cores) by an atomic counter, so long documents balance.
std::vector<std::vector<int32_t>> encode_documents(const Tokenizer& tokenizer, std::span<const std::string> documents,
                                                   int64_t threads, EncodeStats& stats);
// The same with any thread-safe `encode(text, out)` that fills `out` with one document's ids.
using EncodeFn = std::function<void(std::string_view, std::vector<int32_t>&)>;
std::vector<std::vector<int32_t>> encode_documents(const EncodeFn& encode, std::span<const std::string> documents,
                                                   int64_t threads, EncodeStats& stats);

int64_t default_threads(int64_t requested);

}  // namespace segtrain::data
