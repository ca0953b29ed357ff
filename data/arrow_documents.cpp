#include "data/arrow_documents.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <vector>

#include "common/error.h"
#include "common/file_io.h"

#if SEGTRAIN_WITH_ARROW
#include <arrow/api.h>
#include <arrow/io/api.h>
#include <arrow/ipc/api.h>
#include <parquet/arrow/reader.h>
#include <parquet/exception.h>
#endif

namespace segtrain::data {

namespace fs = std::filesystem;

bool is_parquet_name(const std::string& path) { return fs::path(path).extension() == ".parquet"; }

bool is_datasets_folder(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) &&
         (fs::is_regular_file(fs::path(dir) / "state.json", ec) || fs::is_regular_file(fs::path(dir) / "dataset_dict.json", ec));
}

namespace {

// The Arrow files a datasets folder holds, in its order: state.json's "_data_files", or each
// split of dataset_dict.json's "splits" in turn.
std::vector<std::string> datasets_files(const fs::path& dir) {
  const fs::path dict = dir / "dataset_dict.json", state = dir / "state.json";
  std::vector<std::string> files;
  try {
    if (fs::is_regular_file(dict)) {
      const auto j = nlohmann::json::parse(read_file(dict, "datasets folder"));
      for (const auto& split : j.at("splits")) {
        const std::string name = split.get<std::string>();
        // A split is a folder beside dataset_dict.json: never this folder, its parent or a path.
        if (name.empty() || name == "." || name.find('/') != std::string::npos || name.find("..") != std::string::npos ||
            !fs::is_regular_file(dir / name / "state.json"))
          throw InputError(dict.string() + ": splits names '" + name + "', which is no Dataset folder (with state.json) in it");
        const auto more = datasets_files(dir / name);
        files.insert(files.end(), more.begin(), more.end());
      }
      return files;
    }
    const auto j = nlohmann::json::parse(read_file(state, "datasets folder"));
    for (const auto& entry : j.at("_data_files")) {
      const std::string name = entry.at("filename").get<std::string>();
      if (name.find('/') != std::string::npos || name.find("..") != std::string::npos)
        throw InputError(state.string() + ": _data_files names '" + name + "' outside its folder");
      files.push_back((dir / name).string());
    }
  } catch (const nlohmann::json::exception& e) {
    throw InputError((fs::is_regular_file(dict) ? dict : state).string() +
                     ": not a datasets folder's record (expected save_to_disk's JSON: " + e.what() + ")");
  }
  if (files.empty()) throw InputError(state.string() + ": _data_files lists no Arrow file");
  return files;
}

}  // namespace

#if SEGTRAIN_WITH_ARROW

namespace {

// Arrow's message on one line (some hold newlines).
std::string one_line(std::string text) {
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

template <class T>
T value_or_throw(arrow::Result<T> result, const std::string& file) {
  if (!result.ok()) throw InputError(file + ": " + one_line(result.status().ToString()));
  return std::move(result).ValueOrDie();
}

void ok_or_throw(const arrow::Status& status, const std::string& file) {
  if (!status.ok()) throw InputError(file + ": " + one_line(status.ToString()));
}

// The text column of a batch, checked: there, and of a string type.
std::shared_ptr<arrow::Array> text_column(const arrow::RecordBatch& batch, const std::string& column,
                                          const std::string& file) {
  auto array = batch.GetColumnByName(column);
  if (!array) {
    std::string names;
    for (const auto& field : batch.schema()->fields()) names += (names.empty() ? "" : ", ") + field->name();
    throw InputError(file + ": no column '" + column + "' (its columns: " + names + "; name the text's with --text-field)");
  }
  const auto type = array->type_id();
  if (type != arrow::Type::STRING && type != arrow::Type::LARGE_STRING && type != arrow::Type::STRING_VIEW)
    throw InputError(file + ": column '" + column + "' holds " + array->type()->ToString() +
                     ", not text (string, large_string or string_view); name the text's with --text-field");
  // Arrow's readers do not check a file's offsets and lengths: a damaged one would be read out of bounds.
  ok_or_throw(array->ValidateFull(), file);
  return array;
}

// Rows of one batch after another, from `next_batch` (nullptr after the last).
class BatchRows : public ArrowDocuments {
 public:
  bool next(std::string& doc) override {
    while (!array_ || row_ >= array_->length()) {
      auto batch = next_batch();
      if (!batch) return false;
      array_ = text_column(*batch, column_, file_);
      row_ = 0;
    }
    const int64_t row = row_++;
    ++rows_;
    doc.clear();
    if (array_->IsNull(row)) return true;
    std::string_view text;
    switch (array_->type_id()) {
      case arrow::Type::STRING: text = static_cast<const arrow::StringArray&>(*array_).GetView(row); break;
      case arrow::Type::LARGE_STRING: text = static_cast<const arrow::LargeStringArray&>(*array_).GetView(row); break;
      default: text = static_cast<const arrow::StringViewArray&>(*array_).GetView(row); break;
    }
    doc.assign(text);
    return true;
  }
  std::string where() const override { return file_ + " (row " + std::to_string(rows_) + ")"; }

 protected:
  explicit BatchRows(std::string column) : column_(std::move(column)) {}
  // The rows of the next file count from 1 again.
  void next_file(std::string file) {
    file_ = std::move(file);
    rows_ = 0;
  }
  virtual std::shared_ptr<arrow::RecordBatch> next_batch() = 0;
  std::string column_, file_;

 private:
  std::shared_ptr<arrow::Array> array_;
  int64_t row_ = 0, rows_ = 0;
};

// A Parquet file's text column, row group by row group, kBatchRows rows at a time: a book
// corpus's rows are large, so a batch holds few.
class ParquetRows final : public BatchRows {
 public:
  static constexpr int64_t kBatchRows = 64;

  ParquetRows(const std::string& path, const std::string& column) : BatchRows(column) {
    file_ = path;
    try {
      auto input = value_or_throw(arrow::io::ReadableFile::Open(path), path);
      parquet::ReaderProperties properties = parquet::default_reader_properties();
      properties.enable_buffered_stream();  // a column chunk streamed, not read whole
      parquet::ArrowReaderProperties arrow_properties;
      arrow_properties.set_batch_size(kBatchRows);
      arrow_properties.set_use_threads(false);
      parquet::arrow::FileReaderBuilder builder;
      ok_or_throw(builder.Open(input, properties), path);
      builder.properties(arrow_properties);
      reader_ = value_or_throw(builder.Build(), path);
      const auto schema = reader_->parquet_reader()->metadata()->schema();
      leaf_ = schema->ColumnIndex(column);
      if (leaf_ < 0) {
        std::string names;
        for (int i = 0; i < schema->num_columns(); ++i) names += (i ? ", " : "") + schema->Column(i)->path()->ToDotString();
        throw InputError(path + ": no column '" + column + "' (its columns: " + names +
                         "; name the text's with --text-field)");
      }
    } catch (const parquet::ParquetException& e) {
      throw InputError(path + ": " + one_line(e.what()));
    }
  }

 private:
  std::shared_ptr<arrow::RecordBatch> next_batch() override {
    try {
      for (;;) {
        if (batches_) {
          auto batch = value_or_throw(batches_->Next(), file_);
          if (batch) return batch;
          batches_.reset();
        }
        if (row_group_ >= reader_->num_row_groups()) return nullptr;
        batches_ = value_or_throw(reader_->GetRecordBatchReader({row_group_++}, {leaf_}), file_);
      }
    } catch (const parquet::ParquetException& e) {
      throw InputError(file_ + ": " + one_line(e.what()));
    }
  }

  std::unique_ptr<parquet::arrow::FileReader> reader_;
  std::unique_ptr<arrow::RecordBatchReader> batches_;
  int leaf_ = -1;
  int row_group_ = 0;
};

// A datasets folder's Arrow files (IPC streams; the IPC file format too), batch by batch.
class DatasetsRows final : public BatchRows {
 public:
  DatasetsRows(const std::string& dir, const std::string& column) : BatchRows(column), files_(datasets_files(dir)) {}

 private:
  std::shared_ptr<arrow::RecordBatch> next_batch() override {
    for (;;) {
      if (stream_) {
        auto batch = value_or_throw(stream_->Next(), file_);
        if (batch) return batch;
        stream_.reset();
      }
      if (file_reader_) {
        if (batch_ < file_reader_->num_record_batches()) return value_or_throw(file_reader_->ReadRecordBatch(batch_++), file_);
        file_reader_.reset();
      }
      if (next_file_ >= files_.size()) return nullptr;
      next_file(files_[next_file_++]);
      auto input = value_or_throw(arrow::io::ReadableFile::Open(file_), file_);
      // The IPC file format starts with "ARROW1"; save_to_disk writes the stream format.
      const auto head = value_or_throw(input->ReadAt(0, 6), file_);
      ok_or_throw(input->Seek(0), file_);  // ReadAt leaves the file's position undefined
      if (head->ToString() == "ARROW1") {
        file_reader_ = value_or_throw(arrow::ipc::RecordBatchFileReader::Open(input), file_);
        batch_ = 0;
      } else {
        stream_ = value_or_throw(arrow::ipc::RecordBatchStreamReader::Open(input), file_);
      }
    }
  }

  std::vector<std::string> files_;
  size_t next_file_ = 0;
  std::shared_ptr<arrow::ipc::RecordBatchStreamReader> stream_;
  std::shared_ptr<arrow::ipc::RecordBatchFileReader> file_reader_;
  int batch_ = 0;
};

}  // namespace

bool arrow_built() { return true; }

std::unique_ptr<ArrowDocuments> open_parquet_documents(const std::string& path, const std::string& column) {
  return std::make_unique<ParquetRows>(path, column);
}

std::unique_ptr<ArrowDocuments> open_datasets_documents(const std::string& dir, const std::string& column) {
  return std::make_unique<DatasetsRows>(dir, column);
}

#else

namespace {

[[noreturn]] void not_built(const std::string& input) {
  throw InputError(input + ": this segtrain was built without Apache Arrow C++, which reads Parquet and datasets "
                   "folders: install pyarrow >= 21 into the build's Python (scripts/requirements.txt) and rebuild, "
                   "or give the corpus as JSONL");
}

}  // namespace

bool arrow_built() { return false; }

std::unique_ptr<ArrowDocuments> open_parquet_documents(const std::string& path, const std::string&) { not_built(path); }

std::unique_ptr<ArrowDocuments> open_datasets_documents(const std::string& dir, const std::string&) {
  (void)datasets_files;
  not_built(dir);
}

#endif

}  // namespace segtrain::data
