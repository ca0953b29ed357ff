#pragma once
// The safetensors format: an 8-byte little-endian header length, a JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the raw little-endian data. Sharded models add model.safetensors.index.json
// {"metadata": {...}, "weight_map": {"name": "file"}}.
#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "models/modules/tensor_source.h"

namespace segtrain::models {

using TensorMap = std::map<std::string, at::Tensor>;

struct MappedFile;

// One file mapped read-only: its tensors are views of the mapping, each keeping the
// mapping alive, and reading one copies only what is read (a rank resuming
// from sharded optimizer state reads its own slices of every file). Throws
// InputError naming the file when it is missing, truncated or its header is
// not valid safetensors.
class MappedSafetensors {
 public:
  explicit MappedSafetensors(const std::string& path);
  const TensorMap& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Each tensor as a source that reads it from the file into a tensor of its own (pread,
  // not the mapping): loading a model this way holds its parameters and one tensor, never
  // the file's pages besides them.
  TensorSources sources() const;

 private:
  std::string path_;
  std::shared_ptr<MappedFile> file_;
  TensorMap tensors_;
  std::map<std::string, std::string> metadata_;
};

// Reads every tensor of one file onto the CPU. Throws InputError naming the file
// when it is missing, truncated or its header is not valid safetensors.
TensorMap read_safetensors(const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

// Writes CPU copies of the tensors; names sorted, header padded to 8 bytes.
// Written atomically (common/atomic_write.h), so a crash leaves no half file.
void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A folder's weights: model.safetensors, or the shards listed by
// model.safetensors.index.json. Throws InputError when neither is there.
TensorMap read_safetensors_dir(const std::string& dir);
// The same as sources, read one at a time when asked (MappedSafetensors::sources).
TensorSources open_safetensors_dir(const std::string& dir);

// Writes model.safetensors, or shards of at most max_shard_bytes plus the index
// when the tensors do not fit in one (0: never shard).
void write_safetensors_dir(const std::string& dir, const TensorMap& tensors, int64_t max_shard_bytes = 0);

}  // namespace segtrain::models
