#pragma once
// The files an evaluation writes (docs/architecture.md, "eval JSON"): eval.json,
// and the per-position loss curve as CSV and SVG.
#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "trainer/eval/task.h"
#include "trainer/runtime/memory.h"

namespace segtrain::trainer {

// Where an evaluation ran and the process's peak memory by then.
struct EvalDevice {
  c10::Device device = c10::kCPU;
  PeakMemory peak;
};

// {"model": ..., "results": [{"length", "loss", "ppl", "sequences", "tokens"}, ...] (perplexity; [] when not
//  in the suite), "tasks": {"<task>": {"seconds", "by_length": [{"length", "trials", "correct", "accuracy",
//  "low", "high", "first": {"answers", "output"}}, ...]}, ...} (every prompt task measured; low/high: Wilson's
//  95% interval of the accuracy; first: what the model wrote for the first prompt, for generating tasks),
//  "device", "peak_rss_mb", "perplexity_seconds" (when timed), and on CUDA "peak_gpu_mb", "peak_gpu_reserved_mb" (with `device`)}
// A run's eval.json also records how it was evaluated, "evaluated": {"step", "precision", "tasks":
// {"<task>": its settings}}, so that `--resume` of a trained run evaluates only the tasks that
// eval.json lacks; `kept` names the tasks whose sections are carried over from `prior` (an
// earlier eval.json of the same step, precision and settings) instead of measured again.
struct EvalRecord {
  nlohmann::json evaluated;  // null: not recorded (segtrain eval --out)
  nlohmann::json prior;      // the earlier eval.json, or null
  std::vector<std::string> kept;
};
// The tasks of `evaluated` that `prior` (an eval.json, or null) holds at its step and precision
// with equal settings.
std::vector<std::string> tasks_already_evaluated(const nlohmann::json& prior, const nlohmann::json& evaluated);

std::string eval_json(const std::string& model_name, const std::vector<TaskResult>& results,
                      const std::optional<EvalDevice>& device = std::nullopt, const EvalRecord& record = {});
// A prompt task's section of the eval JSON (and of the grid's row records).
nlohmann::json task_scores_json(const std::vector<TaskScore>& scores);

// CSV "length,position,loss" of every per-position curve, and an SVG plot of
// them (one colour per length, raw faint under bucket means, L_t dashed when
// train_length > 0).
// The result that holds perplexity by length (the perplexity task's), or nullptr.
const TaskResult* perplexity_result(const std::vector<TaskResult>& results);

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

// Each file is written atomically; the per-position files when perplexity is among `results`.
void write_eval_outputs(const EvalOutputs& outputs, const std::string& model_name,
                        const std::vector<TaskResult>& results, const EvalDevice& device,
                        const EvalRecord& record = {});

}  // namespace segtrain::trainer
