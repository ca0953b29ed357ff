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

std::filesystem::path path_inside(const std::filesystem::path& folder, const std::string& name,
                                  const std::string& file, const std::string& entry) {
  const std::filesystem::path relative(name);
  const std::filesystem::path normal = relative.lexically_normal();
  const bool leaves = !normal.empty() && *normal.begin() == "..";
  if (name.empty() || relative.is_absolute() || relative.has_root_name() || leaves || normal == ".")
    throw InputError(file + ": " + entry + " is '" + name + "': expected the name of a file inside '" +
                     folder.string() + "' (" +
                     (name.empty() ? "it is empty" : leaves ? "it leaves the folder" : normal == "." ? "it is the folder itself" : "it is absolute") +
                     ")");
  return folder / normal;
}

}  // namespace segtrain
