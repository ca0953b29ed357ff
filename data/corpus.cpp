#include "data/corpus.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "common/file_io.h"
#include "data/arrow_documents.h"
#include "data/file_stream.h"

namespace segtrain::data {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_text_name(const std::string& name) {
  const std::string base = without_compression_suffix(name);
  return ends_with(base, ".txt") || ends_with(base, ".md") || ends_with(base, ".rst");
}
bool is_jsonl_name(const std::string& name) {
  const std::string base = without_compression_suffix(name);
  return ends_with(base, ".jsonl") || ends_with(base, ".json");
}

bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; });
}

constexpr size_t kNamedInvalidDocuments = 5;

void count_invalid_utf8(const std::string& where, CorpusStats& stats) {
  ++stats.invalid_utf8;
  if (stats.invalid_utf8_where.size() < kNamedInvalidDocuments) stats.invalid_utf8_where.push_back(where);
}

// Whether `doc` is a document to keep; counted in `stats` either way.
bool keep(const std::string& doc, const std::string& where, CorpusStats& stats) {
  if (!is_valid_utf8(doc)) {
    count_invalid_utf8(where, stats);
    return false;
  }
  if (is_blank(doc)) {
    ++stats.empty;
    return false;
  }
  stats.bytes += static_cast<int64_t>(doc.size());
  ++stats.documents;
  return true;
}

}  // namespace

// Reads a file line by line as FileStream decompresses it, so a multi-gigabyte
// .jsonl(.gz, .zst) never has to fit in memory.
class LineReader {
 public:
  explicit LineReader(const std::string& path) : stream_(path) {}

  // Bytes of the file read so far (compressed), for progress.
  int64_t offset() const { return stream_.offset(); }

  bool next(std::string& line) {
    line.clear();
    for (;;) {
      if (pos_ == end_) {
        if (eof_) return !line.empty();
        const size_t got = stream_.read(buffer_, sizeof buffer_);
        pos_ = 0;
        end_ = got;
        eof_ = got == 0;
        continue;
      }
      const char* start = buffer_ + pos_;
      const auto* newline = static_cast<const char*>(std::memchr(start, '\n', end_ - pos_));
      if (newline) {
        line.append(start, static_cast<size_t>(newline - start));
        pos_ += static_cast<size_t>(newline - start) + 1;
        return true;
      }
      line.append(start, end_ - pos_);
      pos_ = end_;
    }
  }

 private:
  FileStream stream_;
  char buffer_[1 << 16];
  size_t pos_ = 0, end_ = 0;
  bool eof_ = false;
};

bool is_valid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    // Fast path: 8 ASCII bytes at a time.
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s + i, 8);
      if ((w & 0x8080808080808080ULL) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned char c = s[i];
    if (c < 0x80) { ++i; continue; }
    int len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else return false;
    if (i + static_cast<size_t>(len) > n) return false;
    for (int k = 1; k < len; ++k) {
      if ((s[i + static_cast<size_t>(k)] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (s[i + static_cast<size_t>(k)] & 0x3F);
    }
    // Overlong forms, UTF-16 surrogates and values beyond U+10FFFF are invalid.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += static_cast<size_t>(len);
  }
  return true;
}

std::string read_text_file(const std::string& path) {
  if (!is_compressed_name(path)) return read_file(path, "corpus file");
  FileStream stream(path);
  std::string out;
  std::vector<char> buffer(size_t{1} << 16);
  while (const size_t got = stream.read(buffer.data(), buffer.size())) out.append(buffer.data(), got);
  return out;
}

std::vector<CorpusFile> corpus_files(const std::vector<std::string>& inputs) {
  std::vector<CorpusFile> out;
  for (const auto& input : inputs) {
    const fs::path path(input);
    std::error_code ec;
    if (is_datasets_folder(input)) {
      out.push_back({path, true});  // its Arrow files, in its own order (arrow_documents.h)
    } else if (fs::is_directory(path, ec)) {
      std::vector<fs::path> files;
      for (auto it = fs::recursive_directory_iterator(path, fs::directory_options::skip_permission_denied, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
        if (it->is_regular_file(ec)) files.push_back(it->path());
      if (ec) throw InputError(input + ": cannot list directory: " + ec.message());
      std::sort(files.begin(), files.end());
      for (auto& f : files) out.push_back({std::move(f), false});
    } else if (fs::exists(path, ec)) {
      out.push_back({path, true});
    } else {
      throw InputError(input + ": no such file or directory");
    }
  }
  return out;
}

CorpusReader::CorpusReader(const std::vector<std::string>& inputs, CorpusOptions options)
    : files_(corpus_files(inputs)), options_(std::move(options)) {
  std::error_code ec;
  for (const auto& file : files_) total_bytes_ += static_cast<int64_t>(fs::file_size(file.path, ec) * !ec);
}

CorpusReader::~CorpusReader() = default;

bool CorpusReader::next(std::string& doc) {
  for (;;) {
    if (lines_) {
      if (next_jsonl_document(doc)) return true;
      done_bytes_ += file_bytes_;
      lines_.reset();
      continue;
    }
    if (arrow_) {
      if (next_arrow_document(doc)) return true;
      done_bytes_ += file_bytes_;
      arrow_.reset();
      continue;
    }
    if (next_file_ >= files_.size()) return false;
    const CorpusFile& file = files_[next_file_++];
    const std::string name = file.path.string();
    std::error_code ec;
    file_bytes_ = static_cast<int64_t>(fs::file_size(file.path, ec) * !ec);
    if (is_parquet_name(name) || is_datasets_folder(name)) {
      ++stats_.files;
      arrow_ = is_parquet_name(name) ? open_parquet_documents(name, options_.text_field)
                                     : open_datasets_documents(name, options_.text_field);
    } else if (is_jsonl_name(name)) {
      ++stats_.files;
      lines_ = std::make_unique<LineReader>(name);
      path_ = name;
      line_number_ = 0;
    } else if (is_text_name(name)) {
      ++stats_.files;
      doc = read_text_file(name);
      done_bytes_ += file_bytes_;
      if (keep(doc, name, stats_)) return true;
    } else if (file.named) {
      throw InputError(name + ": unsupported input (expected a directory, .txt/.md/.rst, .jsonl, optionally .gz or "
                              ".zst, .parquet, a datasets folder, or a Megatron .bin/.idx pair)");
    } else {
      ++stats_.skipped_files;
      done_bytes_ += file_bytes_;
    }
  }
}

bool CorpusReader::next_jsonl_document(std::string& doc) {
  while (lines_->next(line_)) {
    ++line_number_;
    if (is_blank(line_)) continue;
    const std::string where = path_ + ":" + std::to_string(line_number_);
    // nlohmann rejects invalid UTF-8 inside strings; such a line is a bad
    // document, not a bad file.
    if (!is_valid_utf8(line_)) {
      count_invalid_utf8(where, stats_);
      continue;
    }
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line_);
    } catch (const std::exception& e) {
      throw InputError(where + ": not valid JSON (" + e.what() + ")");
    }
    if (!j.is_object() || !j.contains(options_.text_field) || !j[options_.text_field].is_string())
      throw InputError(where + ": expected a JSON object with a string field '" + options_.text_field +
                       "' (set it with --text-field)");
    doc = std::move(j[options_.text_field].get_ref<std::string&>());
    if (keep(doc, where, stats_)) return true;
  }
  return false;
}

bool CorpusReader::next_arrow_document(std::string& doc) {
  while (arrow_->next(doc))
    if (keep(doc, arrow_->where(), stats_)) return true;
  return false;
}

int64_t CorpusReader::bytes_read() const { return done_bytes_ + (lines_ ? lines_->offset() : 0); }

std::vector<std::string> read_corpus(const std::vector<std::string>& inputs, const CorpusOptions& options,
                                     CorpusStats& stats) {
  std::vector<std::string> docs;
  CorpusReader reader(inputs, options);
  for (std::string doc; reader.next(doc);) docs.push_back(std::move(doc));
  stats = reader.stats();
  return docs;
}

std::string describe(const CorpusStats& s) {
  std::ostringstream out;
  out << s.documents << " documents (" << s.bytes << " bytes) from " << s.files << " files; skipped " << s.empty
      << " empty and " << s.invalid_utf8 << " invalid UTF-8 documents";
  if (!s.invalid_utf8_where.empty()) {
    out << " (";
    for (size_t i = 0; i < s.invalid_utf8_where.size(); ++i) out << (i ? ", " : "") << s.invalid_utf8_where[i];
    if (s.invalid_utf8 > static_cast<int64_t>(s.invalid_utf8_where.size())) out << ", ...";
    out << ")";
  }
  if (s.skipped_files) out << " and " << s.skipped_files << " files of other types";
  return out.str();
}

}  // namespace segtrain::data
