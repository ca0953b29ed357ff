#include "trainer/experiment/imported_rows.h"

#include <algorithm>
#include <filesystem>

#include "common/error.h"
#include "trainer/config/eval_tasks.h"
#include "trainer/experiment/more_windows.h"

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

}  // namespace segtrain::trainer
