#include "common/output_path.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/atomic_write.h"
#include "common/error.h"

namespace segtrain {

namespace fs = std::filesystem;

namespace {

// The folder itself, or where it will be created: the nearest ancestor that exists.
fs::path nearest_existing(fs::path p) {
  p = fs::absolute(p).lexically_normal();
  while (!p.empty() && !fs::exists(p) && p != p.parent_path()) p = p.parent_path();
  return p;
}

void check_writable_folder(const fs::path& folder, const std::string& what, const fs::path& target) {
  if (!fs::is_directory(folder))
    throw InputError(what + " '" + target.string() + "': '" + folder.string() + "' is a file, not a folder");
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    throw InputError(what + " '" + target.string() + "': cannot write into '" + folder.string() + "': " +
                     std::strerror(errno));
}

}  // namespace

void check_output_folder(const fs::path& dir, const std::string& what, const std::string& whose,
                         const std::function<bool(const fs::path& entry)>& ours) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw InputError(what + " '" + dir.string() + "' is a file; " + whose + " is a folder: give a new folder's name");
  if (!fs::exists(dir, ec)) {
    check_writable_folder(nearest_existing(dir), what, dir);
    return;
  }
  std::vector<std::string> foreign;
  size_t count = 0;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (ours(entry.path()) || is_incomplete_write(entry.path())) continue;
    if (foreign.size() < 3) foreign.push_back(entry.path().filename().string());
    ++count;
  }
  if (ec) throw InputError(what + " '" + dir.string() + "': cannot list it: " + ec.message());
  if (count > 0) {
    std::string names;
    for (const auto& n : foreign) names += (names.empty() ? "" : ", ") + n;
    if (count > foreign.size()) names += ", ... (" + std::to_string(count) + " in all)";
    throw InputError(what + " '" + dir.string() + "' holds files segtrain did not write there (" + names +
                     "); give a new or empty folder for " + whose);
  }
  check_writable_folder(dir, what, dir);
}

void check_output_file(const fs::path& file, const std::string& what) {
  std::error_code ec;
  if (fs::is_directory(file, ec))
    throw InputError(what + " '" + file.string() + "' is a folder; give a file name");
  const fs::path folder = file.has_parent_path() ? file.parent_path() : fs::path(".");
  if (!fs::exists(folder, ec))
    throw InputError(what + " '" + file.string() + "': the folder '" + folder.string() +
                     "' does not exist; create it first (mkdir -p " + folder.string() + ")");
  check_writable_folder(folder, what, file);
}

}  // namespace segtrain
