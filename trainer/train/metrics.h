#pragma once
// What a run reports while it trains: metrics.jsonl (one JSON line per logged
// step), TensorBoard scalars and the console progress line (redrawn in place on
// a terminal, one log line per report otherwise).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/progress.h"  // format_duration
#include "trainer/train/tensorboard.h"

namespace segtrain::trainer {

class Metrics {
 public:
  // An empty run_dir (ranks other than 0) records nothing and only logs. After a
  // resume, lines and TensorBoard events of steps past `resume_step` are
  // dropped: those steps run again.
  Metrics(const std::filesystem::path& run_dir, bool tensorboard, int64_t resume_step, int64_t total_steps);
  ~Metrics();

  // `row` has step, tokens, loss, lr, grad_norm, tokens_per_s (and more).
  void record(const nlohmann::json& row, double seconds_left);
  void eval_scalars(const std::vector<std::pair<std::string, double>>& scalars, int64_t step);
  // Ends the live progress line before other output.
  void newline();

 private:
  void keep_lines_up_to(int64_t step);

  std::filesystem::path path_;
  int64_t total_steps_;
  bool live_;
  bool printed_live_ = false;
  std::ofstream out_;
  std::unique_ptr<TensorBoardWriter> tb_;
};

}  // namespace segtrain::trainer
