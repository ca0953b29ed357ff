#include "trainer/eval/eval_outputs.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "common/atomic_write.h"
#include "common/log.h"
#include "trainer/eval/plot.h"

namespace segtrain::trainer {

std::string eval_json(const std::string& model_name, const std::vector<LengthResult>& results,
                      const std::vector<PasskeyResult>& passkey, const std::optional<EvalDevice>& device) {
  nlohmann::json out = {{"model", model_name}, {"results", nlohmann::json::array()}};
  for (const auto& r : results) {
    nlohmann::json row = {{"length", r.length}, {"sequences", r.sequences}, {"tokens", r.tokens}};
    row["loss"] = std::isfinite(r.loss) ? nlohmann::json(r.loss) : nlohmann::json(nullptr);
    row["ppl"] = std::isfinite(r.ppl) ? nlohmann::json(r.ppl) : nlohmann::json(nullptr);
    out["results"].push_back(row);
  }
  if (!passkey.empty()) {
    out["passkey"] = nlohmann::json::array();
    for (const auto& p : passkey)
      out["passkey"].push_back(
          {{"length", p.length}, {"trials", p.trials}, {"correct", p.correct}, {"accuracy", p.accuracy()}});
  }
  if (device) {
    out["device"] = device->device.str();
    out.update(peak_memory_json(device->peak));
    if (device->perplexity_seconds > 0) out["perplexity_seconds"] = device->perplexity_seconds;
  }
  return out.dump(2) + "\n";
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
                        const std::vector<LengthResult>& results, const std::vector<PasskeyResult>& passkey,
                        const EvalDevice& device) {
  write_file_atomic(outputs.json, eval_json(model_name, results, passkey, device));
  if (!outputs.per_position_csv.empty()) write_file_atomic(outputs.per_position_csv, per_position_csv(results));
  if (!outputs.per_position_svg.empty())
    write_file_atomic(outputs.per_position_svg, per_position_svg(results, model_name, outputs.train_length));
}

void log_perplexity(const std::string& label, const std::vector<LengthResult>& results) {
  for (const auto& r : results)
    log::info(label, "L=", r.length, ": ppl ", r.ppl, " (loss ", r.loss, ") over ", r.tokens, " tokens in ",
              r.sequences, " sequences");
}

void log_passkey(const std::vector<PasskeyResult>& passkey) {
  for (const auto& p : passkey) log::info("passkey L=", p.length, ": ", p.correct, "/", p.trials, " correct");
}

}  // namespace segtrain::trainer
