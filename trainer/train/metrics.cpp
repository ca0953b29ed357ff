#include "trainer/train/metrics.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "common/atomic_write.h"
#include "common/file_io.h"
#include "common/log.h"

namespace segtrain::trainer {

Metrics::Metrics(const fs::path& run_dir, bool tensorboard, int64_t resume_step, int64_t total_steps)
    : path_(run_dir.empty() ? fs::path() : run_dir / "metrics.jsonl"),
      total_steps_(total_steps),
      live_(!run_dir.empty() && ::isatty(STDERR_FILENO) != 0) {
  if (run_dir.empty()) return;
  keep_lines_up_to(resume_step);
  out_.open(path_, std::ios::app);
  if (!out_) throw std::runtime_error("cannot write '" + path_.string() + "': " + std::strerror(errno));
  keep_events_up_to(run_dir / "tensorboard", resume_step);  // even with tensorboard off now: no stale points
  if (tensorboard) tb_ = std::make_unique<TensorBoardWriter>(run_dir / "tensorboard");
}

Metrics::~Metrics() {
  if (live_ && printed_live_) std::cerr << "\n";
}

void Metrics::record(const nlohmann::json& row, double seconds_left) {
  if (out_.is_open()) {
    out_ << row.dump() << "\n";
    out_.flush();
    if (!out_) throw std::runtime_error("cannot write '" + path_.string() + "': " + std::strerror(errno));
  }
  const int64_t step = row["step"];
  if (tb_) {
    for (const char* key : {"loss", "lr", "grad_norm", "tokens_per_s"})
      if (row[key].is_number()) tb_->scalar(std::string("train/") + key, row[key].get<double>(), step);
    if (row.contains("source_loss"))  // a mixture's loss on each source's tokens
      for (const auto& [name, loss] : row["source_loss"].items())
        if (loss.is_number()) tb_->scalar("train/loss/" + name, loss.get<double>(), step);
    tb_->flush();
  }
  std::ostringstream line;
  const double loss = row["loss"].is_number() ? row["loss"].get<double>() : std::nan("");
  line << "step " << step << "/" << total_steps_ << "  loss " << std::fixed << std::setprecision(4) << loss
       << "  lr " << std::scientific << std::setprecision(2) << row["lr"].get<double>() << "  " << std::fixed
       << std::setprecision(0) << row["tokens_per_s"].get<double>() << " tok/s  ETA " << format_duration(seconds_left);
  if (live_) {
    std::cerr << "\r\033[K" << line.str() << std::flush;
    printed_live_ = true;
  } else {
    log::info(line.str());
  }
}

void Metrics::eval_scalars(const std::vector<std::pair<std::string, double>>& scalars, int64_t step) {
  if (!tb_) return;
  for (const auto& [tag, value] : scalars) tb_->scalar(tag, value, step);
  tb_->flush();
}

void Metrics::newline() {
  if (live_ && printed_live_) std::cerr << "\n", printed_live_ = false;
}

void Metrics::keep_lines_up_to(int64_t step) {
  if (!fs::exists(path_)) return;
  std::istringstream in(read_file(path_, "metrics"));
  std::string kept, line;
  while (std::getline(in, line)) {
    try {
      if (nlohmann::json::parse(line).value("step", int64_t{0}) <= step) kept += line + "\n";
    } catch (const nlohmann::json::exception&) {
    }
  }
  write_file_atomic(path_, kept);
}

}  // namespace segtrain::trainer
