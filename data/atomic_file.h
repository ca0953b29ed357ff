#pragma once
// Files that appear complete or not at all: written to a temporary sibling,
// fsynced, then renamed over the target (DESIGN.md: atomic writes), so a crash
// or a full disk never leaves a half-written store that looks valid.
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

void write_file_atomically(const std::string& path, const std::string& content);

}  // namespace segtrain::data
