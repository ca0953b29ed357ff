#include "common/file_io.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace segtrain {

std::string read_file(const std::filesystem::path& path, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InputError("cannot read " + what + " '" + path.string() + "': it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot read " + what + " '" + path.string() + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError("cannot read " + what + " '" + path.string() + "': " + std::strerror(errno));
  return text.str();
}

}  // namespace segtrain
