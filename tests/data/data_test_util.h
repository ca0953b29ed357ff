#pragma once
// Stores whose token ids encode where they came from: token(doc, i) =
// doc * kStride + i, so a test can check any sampled token against a formula
// instead of against the reader it is testing.
#include <string>
#include <vector>

#include "data/token_store.h"
#include "test_util.h"

namespace segtrain::test {

inline constexpr int32_t kStride = 1 << 16;
inline constexpr int64_t kCodedVocab = int64_t{1} << 24;  // int32 store

inline int32_t coded_token(int64_t doc, int64_t i) { return static_cast<int32_t>(doc * kStride + i); }

// Every document lands in train (valid fraction 0) unless `valid_fraction` > 0.
inline data::StoreMeta write_coded_store(const std::string& dir, const std::vector<int64_t>& lengths,
                                         double valid_fraction = 0.0, uint64_t seed = 7) {
  std::vector<int32_t> doc;
  data::StoreMeta meta;
  meta.vocab_size = kCodedVocab;
  meta.eos_id = 0;
  meta.tokenizer = "test";
  return data::write_store(
      dir, static_cast<int64_t>(lengths.size()),
      [&](int64_t d) {
        doc.resize(static_cast<size_t>(lengths[static_cast<size_t>(d)]));
        for (size_t i = 0; i < doc.size(); ++i) doc[i] = coded_token(d, static_cast<int64_t>(i));
        return std::span<const int32_t>(doc);
      },
      meta, valid_fraction, seed);
}

}  // namespace segtrain::test

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

namespace segtrain::test {

template <class T>
void poke(std::string& bytes, size_t at, T value) {
  std::memcpy(bytes.data() + at, &value, sizeof value);
}

// One way to damage a store written by write_coded_store({300, 200, 100}) and
// what opening it must then report: the damaged file's name and the fault.
struct Corruption {
  std::string name;
  std::function<void(const std::filesystem::path& store)> damage;
  std::string file;   // the file the message must name
  std::string fault;  // a phrase the message must contain
};

inline std::vector<Corruption> corruptions() {
  using P = std::filesystem::path;
  auto edit_idx = [](std::function<void(std::string&)> f) {
    return [f](const P& s) {
      auto b = read_file(s / "train.idx");
      f(b);
      write_file(s / "train.idx", b);
    };
  };
  constexpr size_t kSizes = 34;  // after magic, version, dtype and the two counts
  return {
      {"truncated_bin", [](const P& s) { std::filesystem::resize_file(s / "train.bin", std::filesystem::file_size(s / "train.bin") - 6); },
       "train.bin", "truncated"},
      {"truncated_idx_header", [](const P& s) { std::filesystem::resize_file(s / "train.idx", 20); }, "train.idx",
       "truncated header"},
      {"bad_magic", edit_idx([](std::string& b) { b[0] = 'X'; }), "train.idx", "bad magic"},
      {"bad_version", edit_idx([](std::string& b) { poke<uint64_t>(b, 9, 2); }), "train.idx", "unsupported version 2"},
      {"bad_dtype", edit_idx([](std::string& b) { b[17] = 7; }), "train.idx", "unsupported dtype code 7"},
      {"sizes_beyond_file", edit_idx([](std::string& b) { poke<uint64_t>(b, 18, 1000); }), "train.idx",
       "sizes beyond the file length"},
      {"absurd_counts", edit_idx([](std::string& b) { poke<uint64_t>(b, 26, ~uint64_t{0} / 2); }), "train.idx",
       "sizes beyond the file length"},
      {"non_monotonic_pointers",
       edit_idx([](std::string& b) {
         uint64_t S;
         std::memcpy(&S, b.data() + 18, 8);
         poke<int64_t>(b, kSizes + 4 * S + 8, 0);  // sequence 1 restarts at byte 0
       }),
       "train.idx", "non-monotonic pointers"},
      {"pointer_past_bin",
       edit_idx([](std::string& b) {
         uint64_t S;
         std::memcpy(&S, b.data() + 18, 8);
         poke<int64_t>(b, kSizes + 4 * S, int64_t{1} << 32);  // sequence 0 starts 4 GiB in
       }),
       "train.idx", "past the end of train.bin"},
      {"bad_document_index",
       edit_idx([](std::string& b) { poke<int64_t>(b, b.size() - 8, 1); }), "train.idx", "document index"},
      {"trailing_bytes", edit_idx([](std::string& b) { b += "garbage!garbage!garbage!"; }), "train.idx",
       "unexpected bytes"},
      {"id_beyond_vocab",
       [](const P& s) {
         auto b = read_file(s / "train.bin");
         poke<int32_t>(b, 8, static_cast<int32_t>(kCodedVocab));
         write_file(s / "train.bin", b);
       },
       "train.bin", "outside the vocabulary"},
      {"negative_id",
       [](const P& s) {
         auto b = read_file(s / "train.bin");
         poke<int32_t>(b, 4, -5);
         write_file(s / "train.bin", b);
       },
       "train.bin", "outside the vocabulary"},
      {"missing_bin", [](const P& s) { std::filesystem::remove(s / "train.bin"); }, "train.bin", "cannot open"},
      {"missing_meta", [](const P& s) { std::filesystem::remove(s / "meta.json"); }, "meta.json", "cannot open"},
      {"meta_not_json", [](const P& s) { write_file(s / "meta.json", "{vocab_size: 12"); }, "meta.json", "not valid JSON"},
  };
}

}  // namespace segtrain::test
