#pragma once
// What a long phase tells while it runs (an evaluation's windows, a prompt's
// prefill, generation): a line at most every few seconds with what is done, the
// rate and the time left, so that no phase longer than that runs in silence.
#include <chrono>
#include <cstdint>
#include <string>

namespace segtrain {

// "1h02m05s", "3m07s"; "?" when not finite.
std::string format_duration(double seconds);

class Progress {
 public:
  // `what` heads each line ("eval: perplexity at L = 4096"), `unit` counts (windows, tokens).
  // A line is logged once the interval passed since the start or the last line: 10 s, or
  // SEGTRAIN_PROGRESS_SECONDS (0: every update, as the tests read them).
  Progress(std::string what, int64_t total, std::string unit);
  // `done` of `total` are finished; `detail` ("12.5 MB/s") follows the time left.
  void update(int64_t done, const std::string& detail = "");

 private:
  using Clock = std::chrono::steady_clock;
  std::string what_, unit_;
  int64_t total_;
  double every_;
  Clock::time_point start_, last_;
};

}  // namespace segtrain
