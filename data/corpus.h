#pragma once
// Corpus readers: directory trees of .txt/.md/.rst (and .gz) files, one document
// per file, and JSONL files (optionally .gz), one document per line in a
// configurable string field. Documents that are empty or not valid UTF-8 are
// skipped and counted, never fatal; malformed JSON is an InputError naming
// file:line, since it usually means the wrong file or field.
#include <cstdint>
#include <filesystem>
#include <memory>
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


class LineReader;
class ArrowDocuments;

// The documents of every input in order, one at a time: the files of a directory in sorted
// path order, so the document order (and so the store) is reproducible; a JSONL file read line
// by line, so memory holds one document (a text file: the file) however large the corpus is.
class CorpusReader {
 public:
  // InputError for a missing input (corpus_files).
  CorpusReader(const std::vector<std::string>& inputs, CorpusOptions options);
  ~CorpusReader();
  CorpusReader(const CorpusReader&) = delete;
  CorpusReader& operator=(const CorpusReader&) = delete;

  // The next kept document into `doc`; false after the last. InputError naming file:line for a
  // line that is not a JSON object with the text field, or an input of an unsupported type.
  bool next(std::string& doc);
  // What was read so far (all of it once next returned false).
  const CorpusStats& stats() const { return stats_; }
  // Bytes of the input files read so far (as on disk: compressed for .gz), and their total, for progress.
  int64_t bytes_read() const;
  int64_t total_bytes() const { return total_bytes_; }

 private:
  bool next_jsonl_document(std::string& doc);
  bool next_arrow_document(std::string& doc);

  std::vector<CorpusFile> files_;
  CorpusOptions options_;
  CorpusStats stats_;
  size_t next_file_ = 0;
  std::unique_ptr<LineReader> lines_;  // the JSONL file being read
  std::unique_ptr<ArrowDocuments> arrow_;  // the Parquet file or datasets folder being read
  std::string path_, line_;
  int64_t line_number_ = 0;
  int64_t total_bytes_ = 0, done_bytes_ = 0, file_bytes_ = 0;
};

// Every document of `inputs` at once (CorpusReader's, in its order): for small corpora and tests.
std::vector<std::string> read_corpus(const std::vector<std::string>& inputs, const CorpusOptions& options,
                                     CorpusStats& stats);

// The whole file, decompressed if it ends in .gz. InputError if unreadable.
std::string read_text_file(const std::string& path);

std::string describe(const CorpusStats& stats);

}  // namespace segtrain::data
