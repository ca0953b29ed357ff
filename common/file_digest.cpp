#include "common/file_digest.h"

#include <fcntl.h>
#include <unistd.h>
#define XXH_INLINE_ALL  // xxHash compiled in from its header: no library at run time
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <thread>

#include "common/error.h"

namespace segtrain {

namespace {

// The file in blocks of 8 MiB through read(2): the page cache stays the only copy,
// so hashing a 16 GB base adds nothing to the process's resident memory.
template <class Consume>
void read_blocks(const std::filesystem::path& file, Consume&& consume) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(file.string() + ": cannot open: " + std::strerror(errno));
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);  // a larger read-ahead
  const std::unique_ptr<char[]> block(new char[size_t{8} << 20]);
  for (;;) {
    const ssize_t n = ::read(fd, block.get(), size_t{8} << 20);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      throw InputError(file.string() + ": read failed: " + std::strerror(error));
    }
    consume(block.get(), static_cast<size_t>(n));
  }
  ::close(fd);
}

std::string hex(uint64_t hash) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

}  // namespace

const char* digest_name(DigestKind kind) { return kind == DigestKind::xxh3_64 ? "xxh3_64" : "fnv1a64"; }

std::string file_digest(const std::filesystem::path& file, DigestKind kind) {
  if (kind == DigestKind::xxh3_64) {
    const std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state(XXH3_createState(), XXH3_freeState);
    if (!state) throw std::bad_alloc();
    XXH3_64bits_reset(state.get());
    read_blocks(file, [&](const char* data, size_t n) { XXH3_64bits_update(state.get(), data, n); });
    return hex(XXH3_64bits_digest(state.get()));
  }
  uint64_t hash = 14695981039346656037ull;  // FNV-1a offset basis
  read_blocks(file, [&](const char* data, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      hash ^= static_cast<unsigned char>(data[i]);
      hash *= 1099511628211ull;  // FNV prime
    }
  });
  return hex(hash);
}

std::vector<std::string> file_digests(const std::vector<std::filesystem::path>& files, DigestKind kind,
                                      unsigned threads) {
  std::vector<std::string> out(files.size());
  std::vector<std::exception_ptr> errors(files.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < files.size(); i = next++) {
      try {
        out[i] = file_digest(files[i], kind);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  const size_t n = std::min<size_t>(std::max(threads, 1u), files.size());
  for (size_t t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (const auto& error : errors)
    if (error) std::rethrow_exception(error);
  return out;
}

}  // namespace segtrain
