#include "common/dir_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <stdexcept>

#include "common/error.h"

namespace segtrain {
namespace fs = std::filesystem;
namespace {

// Locks this process holds, by canonical directory: flock conflicts between two
// open files of one process too, and a grid's rows run inside the grid's folder.
// The pid tells a forked child (which inherits the map, not the locks) apart.
struct Held {
  pid_t pid = 0;
  int count = 0;  // DirectoryLocks holding it
};
std::mutex g_mutex;
std::map<std::string, Held> g_held;

std::string os_error(const std::string& what, const fs::path& path) {
  return what + " '" + path.string() + "': " + std::strerror(errno);
}

std::string hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown host";
  return name;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return text;
}

// Who holds a lock, from the record it wrote: "host=<h> pid=<p> command=<c> since=<t>".
struct Holder {
  std::string host, pid, command, since;
  std::string describe() const {
    if (pid.empty()) return "another process (one that has not written its name: not segtrain, or starting)";
    return (command.empty() ? std::string("a process") : command) + " (pid " + pid + " on host " + host +
           (since.empty() ? "" : ", since " + since) + ")";
  }
  std::string how_to_stop() const { return pid.empty() ? "stop it" : "stop it: kill -TERM " + pid + " on " + host; }
};

Holder holder_of(int fd) {
  std::string text(512, '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  if (const auto nl = text.find('\n'); nl != std::string::npos) text.resize(nl);
  auto field = [&](const std::string& key, const std::string& next) {
    const auto at = text.find(key + "=");
    if (at == std::string::npos) return std::string();
    const auto start = at + key.size() + 1;
    const auto end = next.empty() ? std::string::npos : text.find(" " + next + "=", start);
    return text.substr(start, end == std::string::npos ? std::string::npos : end - start);
  };
  return {field("host", "pid"), field("pid", "command"), field("command", "since"), field("since", "")};
}

bool locks_unsupported(int error) { return error == ENOLCK || error == EOPNOTSUPP || error == ENOSYS || error == EINVAL; }

}  // namespace

struct DirectoryLock::State {
  std::string key;  // canonical directory
  int fd = -1;
  std::string warning;
};

DirectoryLock::DirectoryLock() = default;
DirectoryLock::DirectoryLock(DirectoryLock&&) noexcept = default;
DirectoryLock& DirectoryLock::operator=(DirectoryLock&&) noexcept = default;

DirectoryLock::~DirectoryLock() {
  if (!state_) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto it = g_held.find(state_->key); it != g_held.end() && --it->second.count == 0) g_held.erase(it);
  if (state_->fd >= 0) ::close(state_->fd);  // releases the flock
}

bool DirectoryLock::held() const { return state_ != nullptr; }

const std::string& DirectoryLock::warning() const {
  static const std::string none;
  return state_ ? state_->warning : none;
}

DirectoryLock DirectoryLock::acquire(const fs::path& dir, const std::string& what, const std::string& subject,
                                     const std::string& command) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create " + what + " '" + dir.string() + "': " + ec.message());
  const std::string key = fs::weakly_canonical(dir).string();
  std::lock_guard<std::mutex> lock(g_mutex);
  DirectoryLock result;
  auto state = std::make_unique<State>();
  state->key = key;
  if (auto it = g_held.find(key); it != g_held.end() && it->second.pid == ::getpid()) {  // ours already
    ++it->second.count;
    result.state_ = std::move(state);
    return result;
  }
  const fs::path file = dir / kFileName;
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(os_error("cannot open the lock file", file));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (error == EWOULDBLOCK) {
      Holder holder = holder_of(fd);
      // A record left by a segtrain process that is gone: the holder is something else.
      const bool numeric = !holder.pid.empty() && holder.pid.size() < 10 &&
                           holder.pid.find_first_not_of("0123456789") == std::string::npos;
      if (numeric && holder.host == hostname() &&
          ::kill(static_cast<pid_t>(std::stol(holder.pid)), 0) != 0 && errno == ESRCH)
        holder = Holder{};
      ::close(fd);
      throw InputError(what + ": " + subject + " in use by " + holder.describe() +
                       "; one process writes a run directory at a time: wait for it to end, " + holder.how_to_stop() +
                       ", or choose another directory");
    }
    if (!locks_unsupported(error)) {
      ::close(fd);
      errno = error;
      throw std::runtime_error(os_error("cannot lock", file));
    }
    state->warning = what + ": '" + dir.string() + "' cannot be locked (" + std::strerror(error) +
                             ": this file system has no advisory locks); nothing stops a second run writing it";
  }
  // Our record for whoever is refused next; a short write only loses the names.
  const std::string record = "host=" + hostname() + " pid=" + std::to_string(::getpid()) + " command=" + command +
                             " since=" + utc_now() + "\n";
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t n = ::pwrite(fd, record.data(), record.size(), 0);
  }
  state->fd = fd;
  g_held[key] = Held{::getpid(), 1};
  result.state_ = std::move(state);
  return result;
}

DirectoryLock DirectoryLock::hold(const fs::path& dir, const std::string& what, const std::string& command) {
  return acquire(dir, what, "'" + dir.string() + "' is", command);
}

DirectoryLock DirectoryLock::hold_enclosing(const fs::path& path, const std::string& what,
                                            const std::string& command) {
  std::error_code ec;
  for (fs::path dir = fs::weakly_canonical(fs::absolute(path), ec);; dir = dir.parent_path()) {
    if (fs::is_regular_file(dir / kFileName, ec))
      return acquire(dir, what, "'" + path.string() + "' is inside the run directory '" + dir.string() + "', which is",
                     command);
    if (dir.empty() || dir == dir.parent_path()) return DirectoryLock();
  }
}

}  // namespace segtrain
