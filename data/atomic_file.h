#pragma once
// A file written as a stream (a token store's .bin can be far larger than
// memory) that appears complete or not at all: written to a temporary sibling,
// fsynced, then renamed over the target. Whole small files (meta.json) use
// common/atomic_write.h instead.
#include <cstddef>
#include <cstdio>
#include <string>

namespace segtrain::data {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // removes the temporary file unless commit() ran
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t bytes);
  void commit();  // flush, fsync, rename onto the target, fsync the directory
  const std::string& path() const { return path_; }

 private:
  std::string path_, temp_;
  std::FILE* file_ = nullptr;
};

}  // namespace segtrain::data
