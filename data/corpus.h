#pragma once
// Corpus readers: directory trees of .txt/.md/.rst (and .gz) files, one document
// per file, and JSONL files (optionally .gz), one document per line in a
// configurable string field. Documents that are empty or not valid UTF-8 are
// skipped and counted, never fatal; malformed JSON is an InputError naming
// file:line, since it usually means the wrong file or field.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace segtrain::data {

struct CorpusStats {
  int64_t files = 0;
  int64_t skipped_files = 0;  // in directories, with other extensions
  int64_t documents = 0;      // kept
  int64_t empty = 0;          // only whitespace
  int64_t invalid_utf8 = 0;
  std::vector<std::string> invalid_utf8_where;  // the first few: "file" or "file:line"
  int64_t bytes = 0;          // of kept documents
};

struct CorpusOptions {
  std::string text_field = "text";
};

bool is_valid_utf8(std::string_view text);

// A file read_corpus reads: one an input names (its type must be supported), or
// one found in an input directory (other types are skipped).
struct CorpusFile {
  std::filesystem::path path;
  bool named = false;
};

// The files of `inputs` in reading order: each input in turn, the files of a
// directory recursively in sorted path order. InputError for a missing input.
std::vector<CorpusFile> corpus_files(const std::vector<std::string>& inputs);


// Every input in order; the files of a directory in sorted path order, so the
// document order (and so the store) is reproducible.
std::vector<std::string> read_corpus(const std::vector<std::string>& inputs, const CorpusOptions& options,
                                     CorpusStats& stats);

// The whole file, decompressed if it ends in .gz. InputError if unreadable.
std::string read_text_file(const std::string& path);

std::string describe(const CorpusStats& stats);

}  // namespace segtrain::data
