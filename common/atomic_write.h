#pragma once
// Crash-safe writes: a checkpoint directory (or file) is built beside its final
// place, fsynced, and renamed in, so a reader sees all of it or none of it.
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <string>

namespace segtrain {

namespace fs = std::filesystem;

class AtomicDir {
 public:
  // Creates an empty "<final>.tmp-<pid>-<n>" sibling to write into.
  explicit AtomicDir(fs::path final_path);
  // Takes over a temporary sibling that already exists (one that several
  // processes wrote into: a run checkpoint's "<final>.tmp-ranks").
  static AtomicDir adopt(fs::path temp_path, fs::path final_path);
  AtomicDir(AtomicDir&& other) noexcept;
  ~AtomicDir();  // removes the temporary directory unless committed
  AtomicDir(const AtomicDir&) = delete;
  AtomicDir& operator=(const AtomicDir&) = delete;
  AtomicDir& operator=(AtomicDir&&) = delete;

  const fs::path& path() const { return temp_; }
  const fs::path& final_path() const { return final_; }
  // fsyncs every file and the directory, then swaps it into place (an existing
  // directory at the final path is replaced atomically and removed).
  void commit();

 private:
  AtomicDir(fs::path final_path, fs::path temp_path) : final_(std::move(final_path)), temp_(std::move(temp_path)) {}
  fs::path final_;
  fs::path temp_;
  bool committed_ = false;
};

// A file written as a stream (a token store's .bin can be far larger than
// memory) that appears complete or not at all: written to a temporary sibling,
// fsynced, then renamed over the target. Errors name the file and the OS's reason.
class AtomicFile {
 public:
  explicit AtomicFile(fs::path final_path);
  ~AtomicFile();  // removes the temporary file unless commit() ran
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t bytes);
  void commit();  // flush, fsync, rename onto the target, fsync the directory
  const fs::path& final_path() const { return final_; }

 private:
  fs::path final_, temp_;
  std::FILE* file_ = nullptr;
};

// Whole-file replacement with the same guarantee (an AtomicFile written at once).
void write_file_atomic(const fs::path& path, const std::string& content);

// True for the temporary siblings AtomicDir leaves behind if the process dies.
bool is_incomplete_write(const fs::path& path);

void fsync_path(const fs::path& path);

}  // namespace segtrain
