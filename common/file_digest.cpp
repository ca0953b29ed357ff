#include "common/file_digest.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "common/error.h"

namespace segtrain {

std::string file_digest(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError(file.string() + ": cannot open: " + std::strerror(errno));
  uint64_t hash = 14695981039346656037ull;  // FNV-1a offset basis
  std::vector<char> block(1 << 20);
  while (in) {
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    for (std::streamsize i = 0; i < in.gcount(); ++i) {
      hash ^= static_cast<unsigned char>(block[static_cast<size_t>(i)]);
      hash *= 1099511628211ull;  // FNV prime
    }
  }
  if (in.bad()) throw InputError(file.string() + ": read failed: " + std::strerror(errno));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  return hex;
}

}  // namespace segtrain
