#pragma once
// Documents of the columnar formats long-context corpora ship in, read through Apache Arrow C++
// (cmake/SegtrainArrow.cmake): a Parquet file (FineWeb, PG-19, The Stack as the Hugging Face
// Hub serves them), read row group by row group in batches of a few rows, and a `datasets`
// folder (`Dataset.save_to_disk`: state.json naming its Arrow IPC stream files, read batch by
// batch; a DatasetDict's dataset_dict.json naming its splits, read in that order). One string
// column (string, large_string or string_view) is the text; a null is an empty document. Memory
// holds a batch, not the file.
//
// Refused with an InputError naming the file: a column that is not there (its columns listed) or
// not a string, and a damaged file (Arrow's reason, on one line); in a build without Arrow, every
// such input, saying what to install.
#include <cstdint>
#include <memory>
#include <string>

namespace segtrain::data {

class ArrowDocuments {
 public:
  virtual ~ArrowDocuments() = default;
  // The next row's text into `doc` (empty for a null); false after the last.
  virtual bool next(std::string& doc) = 0;
  // Where a message names the row just read: "FILE (row N)".
  virtual std::string where() const = 0;
};

// Whether this build reads them (it found Arrow C++).
bool arrow_built();
// `path` ends in .parquet.
bool is_parquet_name(const std::string& path);
// `dir` is a datasets folder: state.json (a Dataset) or dataset_dict.json (a DatasetDict).
bool is_datasets_folder(const std::string& dir);

std::unique_ptr<ArrowDocuments> open_parquet_documents(const std::string& path, const std::string& column);
std::unique_ptr<ArrowDocuments> open_datasets_documents(const std::string& dir, const std::string& column);

}  // namespace segtrain::data
