#include "common/atomic_write.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace segtrain {
namespace {

std::atomic<int> g_counter{0};

fs::path temp_sibling(const fs::path& final_path) {
  return final_path.parent_path() / (final_path.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                                     std::to_string(g_counter++));
}

[[noreturn]] void fail(const std::string& what, const fs::path& path) {
  throw std::runtime_error(what + " '" + path.string() + "': " + std::strerror(errno));
}

}  // namespace

void fsync_path(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open for fsync", path);
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) fail("fsync failed for", path);
}

AtomicDir::AtomicDir(fs::path final_path) : final_(std::move(final_path)), temp_(temp_sibling(final_)) {
  if (!final_.parent_path().empty()) fs::create_directories(final_.parent_path());
  fs::create_directory(temp_);
}

AtomicDir AtomicDir::adopt(fs::path temp_path, fs::path final_path) {
  return AtomicDir(std::move(final_path), std::move(temp_path));
}

AtomicDir::AtomicDir(AtomicDir&& other) noexcept
    : final_(std::move(other.final_)), temp_(std::move(other.temp_)), committed_(other.committed_) {
  other.committed_ = true;  // the moved-from object removes nothing
}

AtomicDir::~AtomicDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(temp_, ec);
}

void AtomicDir::commit() {
  for (const auto& entry : fs::recursive_directory_iterator(temp_))
    if (entry.is_regular_file()) fsync_path(entry.path());
  fsync_path(temp_);
  const fs::path parent = final_.parent_path().empty() ? fs::path(".") : final_.parent_path();
  if (fs::exists(final_)) {
    // Swap in one step so the final path never goes missing, then drop the old one.
    if (::renameat2(AT_FDCWD, temp_.c_str(), AT_FDCWD, final_.c_str(), RENAME_EXCHANGE) != 0) {
      if (errno != EINVAL && errno != ENOSYS) fail("cannot replace", final_);
      // No atomic exchange on this filesystem (NFS, some FUSE): move the old
      // directory aside first; a crash in between leaves it as a .tmp- sibling.
      const fs::path aside = temp_sibling(final_);
      if (::rename(final_.c_str(), aside.c_str()) != 0) fail("cannot move aside", final_);
      if (::rename(temp_.c_str(), final_.c_str()) != 0) fail("cannot rename into", final_);
      fsync_path(parent);
      committed_ = true;
      std::error_code ec;
      fs::remove_all(aside, ec);
      return;
    }
    fsync_path(parent);
    committed_ = true;
    std::error_code ec;
    fs::remove_all(temp_, ec);  // now holds the previous contents
    return;
  }
  if (::rename(temp_.c_str(), final_.c_str()) != 0) fail("cannot rename into", final_);
  fsync_path(parent);
  committed_ = true;
}

AtomicFile::AtomicFile(fs::path final_path) : final_(std::move(final_path)), temp_(temp_sibling(final_)) {
  file_ = std::fopen(temp_.c_str(), "wb");
  if (!file_) fail("cannot create", final_);
}

AtomicFile::~AtomicFile() {
  if (!file_) return;
  std::fclose(file_);
  std::remove(temp_.c_str());  // never leave a half-written sibling behind
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  // Errors name the file the user asked for; the temporary sibling is removed.
  if (bytes && std::fwrite(data, 1, bytes, file_) != bytes) fail("cannot write", final_);
}

void AtomicFile::commit() {
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0) fail("cannot write", final_);
  std::fclose(file_);
  file_ = nullptr;
  if (::rename(temp_.c_str(), final_.c_str()) != 0) {
    const int saved = errno;
    std::remove(temp_.c_str());
    errno = saved;
    fail("cannot rename into", final_);
  }
  // The rename itself is only durable once the directory entry is on disk.
  fsync_path(final_.parent_path().empty() ? fs::path(".") : final_.parent_path());
}

void write_file_atomic(const fs::path& path, const std::string& content) {
  AtomicFile file(path);
  file.write(content.data(), content.size());
  file.commit();
}

bool is_incomplete_write(const fs::path& path) {
  return path.filename().string().find(".tmp-") != std::string::npos;
}

}  // namespace segtrain
