#pragma once
// One writer per run directory (docs/architecture.md, "Run directory"): a run,
// an experiment grid, or a command writing into a run directory holds an
// advisory lock (flock) on <dir>/.segtrain.lock from start to exit. The OS drops
// it when the process dies, so a killed run never blocks its own resume; the
// file itself stays (deleting it would let a waiter lock an orphaned inode).
// The file holds the holder's host, pid, command and start time, which the
// refusal names.
//
// Where flock is not supported (some network file systems: Lustre mounted
// without `flock`, older CIFS) the lock cannot be had: the holder runs without
// it and `warning()` says so. On NFS, Linux maps flock to NFS byte-range locks,
// which hold across hosts when the server runs a lock manager.
#include <filesystem>
#include <memory>
#include <string>

namespace segtrain {

class DirectoryLock {
 public:
  // Locks `dir` (created if missing) for `command` ("segtrain train"). When
  // another process holds it: InputError "<what>: '<dir>' is in use by ..."
  // naming the holder and what to do. A directory this process already holds
  // (a grid's row inside the grid's own directory) is held again at no cost.
  static DirectoryLock hold(const std::filesystem::path& dir, const std::string& what, const std::string& command);

  // Locks the run directory that `path` lies in (the nearest enclosing folder
  // with a .segtrain.lock), if any: a command writing `path` into a run's folder
  // waits for no one and is refused while the run holds it. An empty lock when
  // `path` is in no run directory.
  static DirectoryLock hold_enclosing(const std::filesystem::path& path, const std::string& what,
                                      const std::string& command);

  DirectoryLock();
  DirectoryLock(DirectoryLock&&) noexcept;
  DirectoryLock& operator=(DirectoryLock&&) noexcept;
  ~DirectoryLock();  // releases the lock (closing the file)

  bool held() const;
  // Non-empty when the file system refused advisory locks: the run goes on unlocked.
  const std::string& warning() const;

  static constexpr const char* kFileName = ".segtrain.lock";

 private:
  static DirectoryLock acquire(const std::filesystem::path& dir, const std::string& what, const std::string& subject,
                               const std::string& command);
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace segtrain
