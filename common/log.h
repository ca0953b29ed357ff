#pragma once
// Rank-aware logging. The interface is free of fmt and spdlog on purpose: this
// header is included next to LibTorch, whose bundled fmt differs from the one
// Debian's spdlog was built with. Messages are assembled with operator<<.
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

// Replaces the current sinks. Safe to call again (for example once the rank is known).
void init(const Options& options);
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
