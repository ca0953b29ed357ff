#pragma once
// The two kinds of failure every command distinguishes (docs/architecture.md, "Exit codes"):
// bad usage or input is the user's to fix (exit 2); anything else is ours (exit 1).
#include <stdexcept>
#include <string>

namespace segtrain {

// Bad usage, config or input. The message names the file, key or line and what
// was expected; main() prints it and exits 2.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A run stopped by SIGINT/SIGTERM after saving its state; main() exits 128+signal.
class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(int signal_number)
      : std::runtime_error("interrupted by signal " + std::to_string(signal_number)),
        signal(signal_number) {}
  int signal;
};

}  // namespace segtrain
