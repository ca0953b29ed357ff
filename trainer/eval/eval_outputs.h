#pragma once
// The files an evaluation writes (docs/architecture.md, "eval JSON"): eval.json,
// and the per-position loss curve as CSV and SVG; and its log lines.
#include <c10/core/Device.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "trainer/eval/passkey.h"
#include "trainer/eval/perplexity.h"
#include "trainer/runtime/memory.h"

namespace segtrain::trainer {

// Where an evaluation ran, the process's peak memory by then, and how long the
// perplexity pass took (0: not timed).
struct EvalDevice {
  c10::Device device = c10::kCPU;
  PeakMemory peak;
  double perplexity_seconds = 0;
};

// {"model": ..., "results": [{"length", "loss", "ppl", "sequences", "tokens"}, ...],
//  "passkey": [{"length", "trials", "correct", "accuracy"}, ...] (when measured),
//  "device", "peak_rss_mb", "perplexity_seconds" (when timed), and on CUDA "peak_gpu_mb", "peak_gpu_reserved_mb" (with `device`)}
std::string eval_json(const std::string& model_name, const std::vector<LengthResult>& results,
                      const std::vector<PasskeyResult>& passkey = {},
                      const std::optional<EvalDevice>& device = std::nullopt);

// CSV "length,position,loss" of every per-position curve, and an SVG plot of
// them (one colour per length, raw faint under bucket means, L_t dashed when
// train_length > 0).
std::string per_position_csv(const std::vector<LengthResult>& results);
std::string per_position_svg(const std::vector<LengthResult>& results, const std::string& title,
                             int64_t train_length = 0);

struct EvalOutputs {
  std::filesystem::path json;
  std::filesystem::path per_position_csv;  // empty: not written
  std::filesystem::path per_position_svg;  // empty: not written
  int64_t train_length = 0;                // L_t marked on the plot; 0: unknown, not marked
};

// A run directory's eval.json and, with per_position, eval_per_position.{csv,svg}.
// train_length: the run's L_t, marked on the plot.
EvalOutputs run_eval_outputs(const std::filesystem::path& run_dir, bool per_position, int64_t train_length = 0);

// Each file is written atomically.
void write_eval_outputs(const EvalOutputs& outputs, const std::string& model_name,
                        const std::vector<LengthResult>& results, const std::vector<PasskeyResult>& passkey,
                        const EvalDevice& device);

// One line per length, after `label` ("eval valid ", or nothing).
void log_perplexity(const std::string& label, const std::vector<LengthResult>& results);
void log_passkey(const std::vector<PasskeyResult>& passkey);

}  // namespace segtrain::trainer
