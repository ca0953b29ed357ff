// An experiment's record (experiment/report.h): row.json, which a resumed grid reads
// back to skip what is done, and results.json, all of the grid's rows, which --render
// and --import-rows read back; write_reports writes results.json with the reports made
// from it.
#include "trainer/experiment/report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/file_io.h"
#include "trainer/eval/eval_outputs.h"
#include "trainer/experiment/report_plots.h"

namespace segtrain::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json number_or_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

// A block's summed loss to 1e-6 nats: the record stays small, the perplexity unchanged.
json rounded(double x) { return number_or_null(std::round(x * 1e6) / 1e6); }

json row_json(const RowResult& row) {
  json results = json::array();
  for (const auto& r : row.results) {
    json windows = json::array();
    for (const auto& w : r.windows) {
      json blocks = json::array();
      for (double v : w.block_nll) blocks.push_back(rounded(v));
      windows.push_back({{"doc", w.doc}, {"start", w.start}, {"block_nll", blocks}});
    }
    json result = {{"length", r.length},
                   {"loss", number_or_null(r.loss)},
                   {"ppl", number_or_null(r.ppl)},
                   {"sequences", r.sequences},
                   {"tokens", r.tokens}};
    if (!windows.empty()) result["windows"] = windows;
    results.push_back(result);
  }
  json out = {{"key", row.key},       {"label", row.label},   {"kind", row.kind},
              {"factor", row.factor}, {"lengths", row.lengths}, {"model", row.model},
              {"train_tokens", row.train_tokens}, {"train_seconds", row.train_seconds},
              {"eval_seconds", row.eval_seconds}, {"results", results}};
  if (row.budget) out["budget"] = row.budget;
  if (!row.variant_of.empty()) out["variant_of"] = row.variant_of;
  if (!row.variant_versus.empty()) out["variant_versus"] = row.variant_versus;
  if (!row.imported_from.empty()) out["imported_from"] = row.imported_from;
  if (row.imported_windows) out["imported_windows"] = row.imported_windows;
  // The curve at the longest length is the one the plots show.
  if (!row.results.empty()) {
    json curve = json::array();
    for (double v : row.results.back().position_loss) curve.push_back(number_or_null(v));
    out["position_loss"] = curve;
  }
  out["evaluated_with"] = row.evaluated_with.empty() ? json(nullptr) : json::parse(row.evaluated_with);
  for (const auto& [name, task] : row.tasks)
    out["tasks"][name] = {{"by_length", task_scores_json(task.scores)}, {"with", json::parse(task.with)},
                          {"seconds", task.seconds}};
  return out;
}

// Each length a row reports is one of its lengths, and each window holds a loss for
// every block of kLossBlock predictions: what the intervals and plots read.
void check_windows(const RowResult& row, const std::string& where) {
  for (const auto& r : row.results) {
    if (std::find(row.lengths.begin(), row.lengths.end(), r.length) == row.lengths.end())
      throw InputError(where + ": row '" + row.label + "' reports length " + std::to_string(r.length) +
                       ", not one of its lengths");
    const auto blocks = static_cast<size_t>((r.length - 1 + kLossBlock - 1) / kLossBlock);
    for (const auto& w : r.windows)
      if (w.block_nll.size() != blocks)
        throw InputError(where + ": row '" + row.label + "' at length " + std::to_string(r.length) + ": a window with " +
                         std::to_string(w.block_nll.size()) + " block losses, expected " + std::to_string(blocks));
  }
}

}  // namespace

std::string row_to_json(const RowResult& row) { return row_json(row).dump(2) + "\n"; }

RowResult row_from_json(const std::string& text, const std::string& source) {
  try {
    const json j = json::parse(text);
    RowResult row;
    row.key = j.at("key");
    row.label = j.at("label");
    row.kind = j.at("kind");
    row.factor = j.at("factor");
    row.lengths = j.at("lengths").get<std::vector<int64_t>>();
    row.model = j.at("model");
    row.train_tokens = j.at("train_tokens");
    row.budget = j.value("budget", int64_t{0});
    row.variant_of = j.value("variant_of", std::string());
    row.variant_versus = j.value("variant_versus", std::vector<std::string>());
    row.train_seconds = j.value("train_seconds", 0.0);
    row.eval_seconds = j.value("eval_seconds", 0.0);
    row.imported_from = j.value("imported_from", std::string());
    row.imported_windows = j.value("imported_windows", int64_t{0});
    auto scores = [](const json& list) {
      std::vector<TaskScore> out;
      for (const auto& p : list) {
        TaskScore score{p.at("length").get<int64_t>(), p.at("trials").get<int64_t>(), p.at("correct").get<double>(), "", {}};
        if (p.contains("first"))
          score.first_output = p.at("first").at("output"),
          score.first_answers = p.at("first").at("answers").get<std::vector<std::string>>();
        out.push_back(score);
      }
      return out;
    };
    if (j.contains("tasks"))
      for (const auto& [name, task] : j.at("tasks").items())
        row.tasks[name] = {scores(task.at("by_length")), task.at("with").dump(), task.value("seconds", 0.0)};
    // A record from before eval.tasks: its passkey figures are the passkey task's.
    if (j.contains("passkey_with") && !j.at("passkey_with").is_null())
      row.tasks["passkey"] = {scores(j.at("passkey")), j.at("passkey_with").dump(), j.value("passkey_seconds", 0.0)};
    row.evaluated_with = j.at("evaluated_with").is_null() ? "" : j.at("evaluated_with").dump();
    for (const auto& r : j.at("results")) {
      LengthResult l;
      l.length = r.at("length");
      // null is what evaluate()'s NaN (no window of that length) was written as.
      l.loss = r.at("loss").is_null() ? NAN : r.at("loss").get<double>();
      l.ppl = r.at("ppl").is_null() ? NAN : r.at("ppl").get<double>();
      l.sequences = r.at("sequences");
      l.tokens = r.at("tokens");
      if (r.contains("windows"))
        for (const auto& w : r.at("windows")) {
          WindowLoss window{w.at("doc").get<int64_t>(), w.at("start").get<int64_t>(), {}};
          for (const auto& v : w.at("block_nll")) window.block_nll.push_back(v.is_null() ? NAN : v.get<double>());
          l.windows.push_back(std::move(window));
        }
      row.results.push_back(l);
    }
    if (!row.results.empty() && j.contains("position_loss"))
      for (const auto& v : j.at("position_loss"))
        row.results.back().position_loss.push_back(v.is_null() ? NAN : v.get<double>());
    return row;
  } catch (const json::exception& e) {
    // A damaged record is not trusted; the caller evaluates the row again.
    RowResult stale;
    stale.evaluated_with = std::string("unreadable: ") + source + ": " + e.what();
    return stale;
  }
}

RecordedGrid read_results(const std::string& file) {
  std::string text;
  try {
    text = read_file(file, "results.json");
  } catch (const InputError& e) {
    throw InputError(file + ": " + e.what());
  }
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(file + ": not JSON (" + std::string(e.what()) + "); expected an experiment's results.json");
  }
  if (!j.is_object() || !j.contains("corpora") || !j.contains("experiment"))
    throw InputError(file + ": expected an experiment's results.json (with \"experiment\" and \"corpora\")");
  try {
    RecordedGrid grid;
    grid.experiment = j.at("experiment");
    for (const auto& c : j.at("corpora")) {
      CorpusResults corpus;
      corpus.name = c.at("name");
      corpus.arch = c.at("arch");
      corpus.store = c.at("store");
      corpus.train_length = c.at("train_length");
      corpus.factors = c.at("factors").get<std::vector<int64_t>>();
      // row_from_json gives a row without a key, and why in evaluated_with, for one it cannot read; the
      // windows must hold what the intervals and plots read.
      auto read_row = [&](const json& r) {
        RowResult row = row_from_json(r.dump(), file);
        if (row.key.empty())
          throw InputError(file + ": corpus '" + corpus.name + "': an unreadable row: " + row.evaluated_with);
        check_windows(row, file);
        return row;
      };
      corpus.base = read_row(c.at("base"));
      for (const auto& row : c.at("rows")) corpus.rows.push_back(read_row(row));
      grid.corpora.push_back(std::move(corpus));
    }
    grid.time = {j.value("wall_seconds", 0.0), j.value("invocations", int64_t{0})};
    return grid;
  } catch (const json::exception& e) {
    throw InputError(file + ": " + std::string(e.what()) + "; expected an experiment's results.json");
  }
}

void write_reports(const ExperimentConfig& x, const std::vector<CorpusResults>& corpora, const GridTime& time) {
  const fs::path out = x.output_dir;
  json all = {{"experiment", x.name}, {"file", x.file}, {"corpora", json::array()}};
  for (const auto& c : corpora) {
    json rows = json::array();
    for (const auto& row : c.rows) rows.push_back(row_json(row));
    all["corpora"].push_back({{"name", c.name},
                              {"arch", c.arch},
                              {"store", c.store},
                              {"train_length", c.train_length},
                              {"factors", c.factors},
                              {"base", row_json(c.base)},
                              {"rows", rows}});
    write_plots(x, c, out / "plots");
  }
  all["wall_seconds"] = time.seconds;
  all["invocations"] = time.invocations;
  write_file_atomic(out / "results.json", all.dump(2) + "\n");
  write_file_atomic(out / "results.md", results_markdown(x, corpora, time));
}

}  // namespace segtrain::trainer
