#pragma once
// The grid's wall time across invocations, kept in <output_dir>/wall_time.json: what
// this invocation has spent so far plus what earlier ones recorded, so that a grid of
// hours run in several sittings reports the time it took in all.
#include <chrono>
#include <filesystem>

#include "trainer/experiment/report.h"

namespace segtrain::trainer {

class GridClock {
 public:
  // `imported`: the time of the grids whose rows this one imports, where it starts
  // when `file` is not there yet.
  GridClock(const std::filesystem::path& file, GridTime imported);
  GridTime now() const;
  void save() const;
  // Saves: a grid stopped by an error keeps the time it ran.
  ~GridClock();

 private:
  std::filesystem::path file_;
  std::chrono::steady_clock::time_point started_;
  GridTime before_;
};

}  // namespace segtrain::trainer
