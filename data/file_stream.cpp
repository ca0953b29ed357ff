#include "data/file_stream.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "common/error.h"

namespace segtrain::data {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string without_compression_suffix(const std::string& name) {
  for (const char* suffix : {".gz", ".zst"})
    if (ends_with(name, suffix)) return name.substr(0, name.size() - std::strlen(suffix));
  return name;
}

bool is_compressed_name(const std::string& name) { return without_compression_suffix(name) != name; }

struct FileStream::Impl {
  std::string path;
  // .gz and plain files: zlib.
  gzFile gz = nullptr;
  // .zst: the file and libzstd's decoder, with its input buffer.
  std::FILE* file = nullptr;
  ZSTD_DCtx* zstd = nullptr;
  std::vector<char> input;
  ZSTD_inBuffer in{nullptr, 0, 0};
  size_t frame_left = 0;  // ZSTD_decompressStream's last hint: 0 once a frame ended
  bool file_ended = false;
  int64_t file_bytes = 0;

  ~Impl() {
    if (gz) gzclose(gz);
    if (zstd) ZSTD_freeDCtx(zstd);
    if (file) std::fclose(file);
  }

  size_t read_gz(char* out, size_t capacity) {
    const int got = gzread(gz, out, static_cast<unsigned>(std::min<size_t>(capacity, 1u << 30)));
    int code = 0;
    const char* message = gzerror(gz, &code);
    if (got < 0 || (code != Z_OK && code != Z_STREAM_END)) throw InputError(path + ": corrupt gzip data (" + message + ")");
    return static_cast<size_t>(got);
  }

  size_t read_zstd(char* out, size_t capacity) {
    ZSTD_outBuffer output{out, capacity, 0};
    while (output.pos == 0) {
      if (in.pos == in.size) {
        if (file_ended) {
          // The data ended inside a frame: a file cut short.
          if (frame_left != 0) throw InputError(path + ": truncated zstd data (the file ends inside a frame)");
          return 0;
        }
        const size_t got = std::fread(input.data(), 1, input.size(), file);
        if (got == 0) {
          if (std::ferror(file)) throw InputError(path + ": cannot be read (" + std::strerror(errno) + ")");
          file_ended = true;
          continue;
        }
        file_bytes += static_cast<int64_t>(got);
        in = {input.data(), got, 0};
      }
      frame_left = ZSTD_decompressStream(zstd, &output, &in);
      if (ZSTD_isError(frame_left))
        throw InputError(path + ": corrupt zstd data (" + ZSTD_getErrorName(frame_left) + ")");
    }
    return output.pos;
  }
};

FileStream::FileStream(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  if (ends_with(path, ".zst")) {
    impl_->file = std::fopen(path.c_str(), "rb");
    if (!impl_->file) throw InputError(path + ": cannot open (" + std::strerror(errno) + ")");
    impl_->zstd = ZSTD_createDCtx();
    if (!impl_->zstd) throw std::runtime_error(path + ": libzstd could not make a decoder");
    impl_->input.resize(ZSTD_DStreamInSize());
    return;
  }
  impl_->gz = gzopen(path.c_str(), "rb");
  if (!impl_->gz) throw InputError(path + ": cannot open (" + std::strerror(errno) + ")");
  gzbuffer(impl_->gz, 1 << 20);
}

FileStream::~FileStream() = default;

size_t FileStream::read(char* out, size_t capacity) {
  if (capacity == 0) return 0;
  return impl_->zstd ? impl_->read_zstd(out, capacity) : impl_->read_gz(out, capacity);
}

int64_t FileStream::offset() const {
  return impl_->zstd ? impl_->file_bytes : static_cast<int64_t>(gzoffset(impl_->gz));
}

}  // namespace segtrain::data
