#include "data/atomic_file.h"

#include "common/atomic_write.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>

namespace segtrain::data {
namespace {

std::runtime_error io_error(const std::string& what, const std::string& path) {
  return std::runtime_error(path + ": " + what + ": " + std::strerror(errno));
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  std::random_device rd;
  temp_ = path_ + ".tmp-" + std::to_string(rd());
  file_ = std::fopen(temp_.c_str(), "wb");
  if (!file_) throw io_error("cannot create", temp_);
}

AtomicFile::~AtomicFile() {
  if (file_) {
    std::fclose(file_);
    std::remove(temp_.c_str());
  }
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  if (bytes && std::fwrite(data, 1, bytes, file_) != bytes) throw io_error("write failed", temp_);
}

void AtomicFile::commit() {
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0) throw io_error("flush failed", temp_);
  std::fclose(file_);
  file_ = nullptr;
  if (std::rename(temp_.c_str(), path_.c_str()) != 0) throw io_error("cannot rename onto", path_);
  // The rename itself is only durable once the directory entry is on disk.
  auto dir = std::filesystem::path(path_).parent_path();
  fsync_path(dir.empty() ? std::filesystem::path(".") : dir);
}

}  // namespace segtrain::data
