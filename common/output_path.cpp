#include "common/output_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
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
  // access() answers from the permission bits: root passes it on /proc and sysfs, where nothing can
  // be created; a folder made and removed again asks the file system itself.
  std::string probe = (folder / ".segtrain-probe-XXXXXX").string();
  if (::mkdtemp(probe.data()) == nullptr)
    throw InputError(what + " '" + target.string() + "': cannot create anything in '" + folder.string() +
                     "': " + std::strerror(errno));
  ::rmdir(probe.c_str());
}

// What a path names on disk, links followed: equal for two paths to the same file or folder.
struct Identity {
  dev_t device;
  ino_t inode;
  bool operator==(const Identity&) const = default;
};

std::optional<Identity> identity_of(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return std::nullopt;
  return Identity{st.st_dev, st.st_ino};
}

// The identities of `p` (when it exists) and of every existing folder above it, nearest first;
// links are resolved first, so that a folder's parent is the one it really sits in.
std::vector<Identity> identities_up_from(const fs::path& p) {
  std::error_code ec;
  fs::path at = fs::weakly_canonical(fs::absolute(p), ec);
  if (ec) at = fs::absolute(p).lexically_normal();
  std::vector<Identity> chain;
  while (true) {
    if (const auto id = identity_of(at)) chain.push_back(*id);
    if (at == at.parent_path()) break;
    at = at.parent_path();
  }
  return chain;
}

bool contains(const std::vector<Identity>& chain, const Identity& id) {
  return std::find(chain.begin(), chain.end(), id) != chain.end();
}

}  // namespace

void check_output_is_no_input(const fs::path& out, const std::string& what, const std::vector<CommandInput>& inputs) {
  const std::optional<Identity> out_id = identity_of(out);
  const std::vector<Identity> out_chain = identities_up_from(out);
  for (const auto& input : inputs) {
    if (input.path.empty()) continue;
    const std::optional<Identity> in_id = identity_of(input.path);
    if (!in_id) continue;
    const std::string named = what + " '" + out.string() + "'";
    const std::string read = input.what + " '" + input.path.string() + "'";
    if (out_id && *out_id == *in_id)
      throw InputError(named + " is " + read + ", which this command reads: writing it would destroy it; "
                       "give another path");
    if (contains(out_chain, *in_id))
      throw InputError(named + " is inside " + read + ", which this command reads: nothing is written into "
                       "what a command reads; give a path outside it");
    if (out_id && contains(identities_up_from(input.path), *out_id))
      throw InputError(named + " holds " + read + ", which this command reads: give a new folder for what it "
                       "writes");
  }
}

void check_can_create(const fs::path& path, const std::string& what) {
  fs::path p = fs::absolute(path).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "run/": the folder run
  check_writable_folder(nearest_existing(p.parent_path()), what, path);
}

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
