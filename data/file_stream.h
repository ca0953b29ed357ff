#pragma once
// A corpus file read as a stream of its bytes, decompressed by the library made for its
// format: zlib for .gz (which passes a file that is not gzip through unchanged, so a plain
// file reads as it is), libzstd's streaming decoder for .zst (every frame of the file, as
// `zstd -d` does: SlimPajama, RedPajama, The Pile and Dolma ship .jsonl.zst). Memory holds one
// buffer, whatever the file's size. A damaged or truncated file is an InputError naming it
// and the library's reason.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace segtrain::data {

class FileStream {
 public:
  // InputError "PATH: cannot open (the OS's reason)".
  explicit FileStream(const std::string& path);
  ~FileStream();
  FileStream(const FileStream&) = delete;
  FileStream& operator=(const FileStream&) = delete;

  // Up to `capacity` bytes of the file's data into `out`; 0 at its end.
  size_t read(char* out, size_t capacity);
  // Bytes of the file itself read so far (compressed), for progress.
  int64_t offset() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// `name` without the compression suffix FileStream reads (".gz", ".zst"), else `name`.
std::string without_compression_suffix(const std::string& name);
// Whether `name` ends with one.
bool is_compressed_name(const std::string& name);

}  // namespace segtrain::data
