// Rows another invocation of the experiment recorded (experiment/imported_rows.h): read
// from their results.json, matched to this grid's rows with their settings checked, the
// imported base row checked against the one scored here, and rows no row of this grid uses named.
#include "trainer/experiment/imported_rows.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <tuple>

#include "common/error.h"
#include "common/log.h"
#include "trainer/config/eval_tasks.h"
#include "trainer/experiment/more_windows.h"
#include "trainer/experiment/row_evaluation.h"

namespace segtrain::trainer {

namespace {

using nlohmann::json;

// The first setting that differs, in a few words.
std::string first_difference(const json& recorded, const json& here) {
  for (const auto& [key, value] : here.items()) {
    if (!recorded.contains(key)) return key + " is not recorded there";
    if (recorded.at(key) != value) return key + " is " + recorded.at(key).dump() + " there, " + value.dump() + " here";
  }
  for (const auto& [key, value] : recorded.items())
    if (!here.contains(key)) return key + " is recorded there, not here";
  return "the settings differ";
}

// The settings a record was measured with, without what names the model: its folder
// and files are another machine's, or another output folder's.
json settings_only(json j) {
  if (j.is_object()) {
    j.erase("model");
    j.erase("model_files");
  }
  return j;
}

}  // namespace

ImportedRows ImportedRows::read(const std::vector<std::string>& files, const std::string& experiment) {
  ImportedRows out;
  std::set<std::filesystem::path> seen;
  for (const auto& file : files) {
    const std::string where = "--import-rows " + file;
    std::error_code ignored;
    if (!seen.insert(std::filesystem::weakly_canonical(file, ignored)).second) continue;
    RecordedGrid grid;
    try {
      grid = read_results(file);
    } catch (const InputError& e) {
      throw InputError("--import-rows " + std::string(e.what()));
    }
    if (grid.experiment != experiment)
      throw InputError(where + ": records experiment \"" + grid.experiment + "\", not \"" + experiment +
                       "\": rows are imported only into the experiment that recorded them");
    for (auto& corpus : grid.corpora) {
      corpus.rows.push_back(std::move(corpus.base));
      for (auto& row : corpus.rows) {
        // A row imported again keeps the file that first recorded it.
        if (row.imported_from.empty()) row.imported_from = file;
        Key key{corpus.name, row.factor, row.key};
        out.rows_[key] = Entry{std::move(row), file};
      }
    }
    out.time_.seconds += grid.time.seconds;
    out.time_.invocations += grid.time.invocations;
  }
  return out;
}

ImportedRows::Found ImportedRows::find(const std::string& corpus, int64_t factor, const std::string& key,
                                       const std::map<std::string, json>& settings) const {
  const auto it = rows_.find({corpus, factor, key});
  if (it == rows_.end()) return {};
  Found found{&it->second.row, false};
  const RowResult& row = it->second.row;
  const std::string what = "--import-rows " + it->second.file + ": row '" + row.label + "' (corpus '" + corpus +
                           "', x" + std::to_string(factor) + ")";
  for (const auto& [task, here] : settings) {
    const json mine = settings_only(here);
    json recorded;
    if (scores_windows(task)) {
      recorded = settings_only(row.evaluated_with.empty() ? json::object() : json::parse(row.evaluated_with));
    } else {
      const auto t = row.tasks.find(task);
      if (t == row.tasks.end())
        throw InputError(what + " has no " + task + " figures, which this experiment's eval.tasks asks for: " +
                         "evaluate it here (delete the row from that file) or leave the task out");
      recorded = settings_only(json::parse(t->second.with));
    }
    if (scores_windows(task) && adds_windows(recorded, mine)) {
      found.more_windows = true;
      continue;
    }
    if (recorded != mine)
      throw InputError(what + " was evaluated with other " + task + " settings (" + first_difference(recorded, mine) +
                       "): evaluate it here (delete the row from that file, or the file from --import-rows)");
  }
  return found;
}

std::vector<std::pair<ImportedRows::Key, std::string>> ImportedRows::unused(const std::set<Key>& used) const {
  std::vector<std::pair<Key, std::string>> out;
  for (const auto& [key, entry] : rows_)
    if (!used.count(key)) out.emplace_back(key, entry.file);
  return out;
}

std::map<size_t, ImportedRows::Found> imported_rows(const ExperimentConfig& x, const CorpusSpec& corpus,
                                                    const std::vector<PlannedRow>& rows, const ImportedRows& imports) {
  std::map<size_t, ImportedRows::Found> out;
  for (size_t i = 0; i < rows.size(); ++i) {
    const PlannedRow& p = rows[i];
    const auto found = imports.find(corpus.name, p.row.factor, p.row.key, task_settings(x, p.row, p.model_dir, p.overrides));
    if (found.row) out[i] = found;
  }
  return out;
}

void check_same_base(const RowResult& here, const RowResult& imported, const std::string& file) {
  const std::string where = "--import-rows " + file + ": its base row ";
  if (imported.results.size() != 1 || imported.results.front().length != here.results.front().length)
    throw InputError(where + "is not scored at L_t = " + std::to_string(here.results.front().length) + " alone");
  auto windows = [](const LengthResult& r) {
    std::vector<std::pair<int64_t, int64_t>> at;
    for (const auto& w : r.windows) at.emplace_back(w.doc, w.start);
    return at;
  };
  const LengthResult &mine = here.results.front(), &theirs = imported.results.front();
  const auto at_theirs = windows(theirs), at_mine = windows(mine);
  // Here more windows when more are asked for (more_windows.h): the imported ones come first.
  if (at_mine.size() < at_theirs.size() || !std::equal(at_theirs.begin(), at_theirs.end(), at_mine.begin()))
    throw InputError(where + "was scored on other held-out windows: its rows come from another store or split");
  double sum = 0;  // the base here over the imported windows
  for (size_t i = 0; i < at_theirs.size(); ++i)
    for (double block : mine.windows[i].block_nll) sum += block;
  // A margin, not equality, for another device's or kernel's rounding (not yet measured on a GPU).
  const double a = std::exp(sum / static_cast<double>(theirs.tokens)), b = theirs.ppl;
  if (!(std::abs(a - b) <= 1e-4 * std::abs(b)))
    throw InputError(where + "scores " + format_factor(b) + " at L_t, the base and store here " + format_factor(a) +
                     " (more than 1e-4 apart): its rows were scored on another base or store");
}

void check_imports(const ExperimentConfig& x, const ImportedRows& imports) {
  std::set<ImportedRows::Key> used;
  for (const auto& corpus : x.corpora) {
    const auto runs = plan_training_runs(x, corpus);  // rows point into it
    const auto rows = plan_rows(x, corpus, runs);
    for (const auto& [index, found] : imported_rows(x, corpus, rows, imports))
      used.insert({corpus.name, found.row->factor, found.row->key});
  }
  for (const auto& [key, file] : imports.unused(used))
    log::warn("--import-rows ", file, ": row '", std::get<2>(key), "' (corpus '", std::get<0>(key), "', x",
              std::get<1>(key), ") is no row of ", x.file, ": not used");
}

}  // namespace segtrain::trainer
