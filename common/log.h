#pragma once
// Rank-aware logging. The interface is free of fmt and spdlog on purpose: this
// header is included next to LibTorch, whose bundled fmt differs from the one
// Debian's spdlog was built with. Messages are assembled with operator<<.
#include <memory>
#include <sstream>
#include <string>

namespace segtrain::log {

enum class Level { trace, debug, info, warn, error, off };

struct Options {
  Level level = Level::info;
  int rank = 0;
  bool console_all_ranks = false;  // by default only rank 0 prints to the console
  std::string file;                // this rank's log file; empty for none
};

// Parses trace|debug|info|warn|error|off; throws InputError naming `what` otherwise.
Level parse_level(const std::string& name, const std::string& what);
const char* level_name(Level level);

// Sets up the process's logger: console, level, rank and an optional file. The
// command does this once, before any work; runs add their own files below.
void init(const Options& options);

// While alive, everything logged also goes to `path` (appended): a training
// run's train.log, or an experiment's experiment.log, without touching the
// console or the level the command chose. InputError when it cannot be opened.
class ScopedFile {
 public:
  explicit ScopedFile(const std::string& path);
  ~ScopedFile();  // never throws: a failing flush (disk full) must not abort the process
  ScopedFile(const ScopedFile&) = delete;
  ScopedFile& operator=(const ScopedFile&) = delete;

 private:
  struct Sink;
  std::unique_ptr<Sink> sink_;
};
bool enabled(Level level);
void write(Level level, const std::string& message);
void flush();

// "spdlog 1.10.0, fmt 90100": what the logger was built against (not torch's fmt).
std::string backend_versions();

template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

template <class... Args> void trace(const Args&... a) { if (enabled(Level::trace)) write(Level::trace, segtrain::log::str(a...)); }
template <class... Args> void debug(const Args&... a) { if (enabled(Level::debug)) write(Level::debug, segtrain::log::str(a...)); }
template <class... Args> void info(const Args&... a) { if (enabled(Level::info)) write(Level::info, segtrain::log::str(a...)); }
template <class... Args> void warn(const Args&... a) { if (enabled(Level::warn)) write(Level::warn, segtrain::log::str(a...)); }
template <class... Args> void error(const Args&... a) { if (enabled(Level::error)) write(Level::error, segtrain::log::str(a...)); }

}  // namespace segtrain::log
