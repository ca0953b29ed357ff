#include "trainer/eval/eval_outputs.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "common/atomic_write.h"
#include "common/wilson.h"
#include "trainer/eval/plot.h"

namespace segtrain::trainer {

nlohmann::json task_scores_json(const std::vector<TaskScore>& scores) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : scores) {
    const Proportion w = wilson(p.correct, p.trials);
    out.push_back({{"length", p.length}, {"trials", p.trials}, {"correct", p.correct},
                   {"accuracy", p.accuracy()}, {"low", w.lo}, {"high", w.hi}});
    if (!p.first_answers.empty()) out.back()["first"] = {{"answers", p.first_answers}, {"output", p.first_output}};
  }
  return out;
}

std::vector<std::string> tasks_already_evaluated(const nlohmann::json& prior, const nlohmann::json& evaluated) {
  std::vector<std::string> kept;
  if (!prior.is_object() || !prior.contains("evaluated") || !evaluated.is_object()) return kept;
  const nlohmann::json& before = prior["evaluated"];
  if (before.value("step", nlohmann::json()) != evaluated["step"] ||
      before.value("precision", nlohmann::json()) != evaluated["precision"] || !before.contains("tasks"))
    return kept;
  for (const auto& [task, settings] : evaluated["tasks"].items()) {
    const bool measured = scores_windows(task) ? prior.contains("results") && !prior["results"].empty()
                                               : prior.contains("tasks") && prior["tasks"].contains(task);
    if (measured && before["tasks"].contains(task) && before["tasks"][task] == settings) kept.push_back(task);
  }
  return kept;
}

std::string eval_json(const std::string& model_name, const std::vector<TaskResult>& results,
                      const std::optional<EvalDevice>& device, const EvalRecord& record) {
  nlohmann::json out = {{"model", model_name}, {"results", nlohmann::json::array()}};
  double perplexity_seconds = 0;
  for (const auto& task : results) {
    if (!task.perplexity.empty()) {
      perplexity_seconds = task.seconds;
      for (const auto& r : task.perplexity) {
        nlohmann::json row = {{"length", r.length}, {"sequences", r.sequences}, {"tokens", r.tokens}};
        row["loss"] = std::isfinite(r.loss) ? nlohmann::json(r.loss) : nlohmann::json(nullptr);
        row["ppl"] = std::isfinite(r.ppl) ? nlohmann::json(r.ppl) : nlohmann::json(nullptr);
        out["results"].push_back(row);
      }
      continue;
    }
    out["tasks"][task.task] = {{"seconds", task.seconds}, {"by_length", task_scores_json(task.scores)}};
  }
  for (const auto& task : record.kept) {
    if (!scores_windows(task)) {
      out["tasks"][task] = record.prior["tasks"][task];
    } else {
      out["results"] = record.prior["results"];
      if (record.prior.contains("perplexity_seconds")) perplexity_seconds = record.prior["perplexity_seconds"];
    }
  }
  if (!record.evaluated.is_null()) out["evaluated"] = record.evaluated;
  if (device) {
    out["device"] = device->device.str();
    out.update(peak_memory_json(device->peak));
    if (perplexity_seconds > 0) out["perplexity_seconds"] = perplexity_seconds;
  }
  return out.dump(2) + "\n";
}

const TaskResult* perplexity_result(const std::vector<TaskResult>& results) {
  for (const auto& r : results)
    if (!r.perplexity.empty()) return &r;
  return nullptr;
}

std::string per_position_csv(const std::vector<LengthResult>& results) {
  std::ostringstream out;
  out << "length,position,loss\n" << std::setprecision(8);
  for (const auto& r : results)
    for (size_t p = 0; p < r.position_loss.size(); ++p) out << r.length << "," << p + 1 << "," << r.position_loss[p] << "\n";
  return out.str();
}

std::string per_position_svg(const std::vector<LengthResult>& results, const std::string& title,
                             int64_t train_length) {
  int64_t longest = 1;
  for (const auto& r : results) longest = std::max(longest, static_cast<int64_t>(r.position_loss.size()));
  const int64_t bucket = position_bucket(longest);
  std::vector<PlotSeries> series;
  for (const auto& r : results)
    if (!r.position_loss.empty()) series.push_back(position_curve("L = " + std::to_string(r.length), r.position_loss, bucket));
  PlotOptions options;
  options.solid_note = "solid: mean of " + std::to_string(bucket) + " positions";
  options.title = title + ": mean loss by position";
  options.x_label = "position (tokens of context before the predicted token)";
  if (train_length > 0) options.markers.push_back({static_cast<double>(train_length), "L_t = " + std::to_string(train_length)});
  return line_plot_svg(options, series);
}

EvalOutputs run_eval_outputs(const std::filesystem::path& run_dir, bool per_position, int64_t train_length) {
  EvalOutputs o{run_dir / "eval.json", {}, {}, train_length};
  if (per_position) o.per_position_csv = run_dir / "eval_per_position.csv", o.per_position_svg = run_dir / "eval_per_position.svg";
  return o;
}

void write_eval_outputs(const EvalOutputs& outputs, const std::string& model_name,
                        const std::vector<TaskResult>& results, const EvalDevice& device,
                        const EvalRecord& record) {
  write_file_atomic(outputs.json, eval_json(model_name, results, device, record));
  const TaskResult* perplexity = perplexity_result(results);
  if (!perplexity) return;
  if (!outputs.per_position_csv.empty())
    write_file_atomic(outputs.per_position_csv, per_position_csv(perplexity->perplexity));
  if (!outputs.per_position_svg.empty())
    write_file_atomic(outputs.per_position_svg,
                      per_position_svg(perplexity->perplexity, model_name, outputs.train_length));
}

}  // namespace segtrain::trainer
