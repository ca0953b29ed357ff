#pragma once
// Store preparation (`segtrain prepare`, and each corpus of an experiment grid):
// text or JSONL -> sentencepiece (trained or given) -> Megatron token store, or
// existing Megatron datasets re-split by document into a store.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace segtrain::data {

inline constexpr int64_t kTrainedVocabSize = 4096;  // a trained tokenizer's, --vocab-size not given
inline constexpr int64_t kTokenizerTrainingThreads = 16;  // sentencepiece's default num_threads

struct PrepareOptions {
  std::vector<std::string> inputs;  // text dirs, .txt/.md/.rst(.gz), .jsonl, or Megatron .bin/.idx prefixes
  std::string out;                  // the store directory
  std::string tokenizer;            // an existing sentencepiece .model, or empty to train one
  // A trained tokenizer's vocabulary (kTrainedVocabSize when not given); for Megatron
  // inputs without a tokenizer, their vocabulary (not given: their store's, or
  // their largest token id + 1).
  std::optional<int64_t> vocab_size;
  std::string model_type = "unigram";  // unigram | bpe
  double character_coverage = 0.9995;
  int64_t sample_size = 2000000;    // sentences fed to sentencepiece training
  std::string text_field = "text";  // JSONL field holding the text
  double valid_fraction = 0.05;
  int64_t seed = 1234;              // seeds the train/valid split and tokenizer training
  int64_t threads = 0;              // encoding threads; 0: all cores
  // A stop while sentencepiece trains the tokenizer (it never asks) exits the process at once:
  // `segtrain prepare`, which has nothing else to save; an experiment grid stops after the store.
  bool stop_exits_tokenizer_training = false;
};

// Writes the store at options.out (train/valid .bin+.idx, tokenizer.model,
// meta.json). InputError for inputs that cannot make a store (none usable,
// text mixed with Megatron datasets, token ids outside the vocabulary).
void prepare_store(const PrepareOptions& options);

}  // namespace segtrain::data
