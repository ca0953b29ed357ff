#pragma once
// The embedded default corpus (`segtrain synth`): long documents whose later
// text depends on earlier text at distances up to the document length. Early in
// each document facts are defined ("the key of mirato is belukasi ."); later,
// among filler sentences, they are recalled ("recall : the key of mirato is
// belukasi ."). Names and values are random pseudo-words, so a model predicts a
// recalled value only by attending back to its definition; the filler follows a
// small grammar a tiny model learns quickly. Every document is a pure function
// of (seed, split, index).
#include <cstdint>
#include <string>

namespace segtrain::data {

struct SynthOptions {
  int64_t documents = 400;     // in all; max(1, documents / 20) go to valid (when >= 2)
  int64_t min_words = 2048;
  int64_t max_words = 4096;
  uint64_t seed = 1234;
};

enum class SynthSplit { train, valid };

std::string synth_document(const SynthOptions& options, SynthSplit split, int64_t index);

struct SynthResult {
  int64_t train_documents = 0, valid_documents = 0, words = 0, bytes = 0;
};

// Writes DIR/train.jsonl and DIR/valid.jsonl ({"text": ...} per line), atomically.
SynthResult write_synth_corpus(const std::string& dir, const SynthOptions& options);

}  // namespace segtrain::data
