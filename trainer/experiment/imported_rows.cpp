#include "trainer/experiment/imported_rows.h"

#include <algorithm>
#include <filesystem>

#include "common/error.h"
#include "common/file_io.h"
#include "trainer/eval/window_loss.h"

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

ImportedRows ImportedRows::read(const std::vector<std::string>& files, const std::string& experiment) {
  ImportedRows out;
  std::set<std::filesystem::path> seen;
  for (const auto& file : files) {
    const std::string where = "--import-rows " + file;
    std::error_code ignored;
    if (!seen.insert(std::filesystem::weakly_canonical(file, ignored)).second) continue;
    std::string text;
    try {
      text = read_file(file, "results.json to import");
    } catch (const InputError& e) {
      throw InputError(where + ": " + e.what());
    }
    json j;
    try {
      j = json::parse(text);
    } catch (const json::exception& e) {
      throw InputError(where + ": not JSON (" + std::string(e.what()) + "); expected an experiment's results.json");
    }
    if (!j.is_object() || !j.contains("corpora") || !j.contains("experiment"))
      throw InputError(where + ": expected an experiment's results.json (with \"experiment\" and \"corpora\")");
    if (j.at("experiment") != experiment)
      throw InputError(where + ": records experiment " + j.at("experiment").dump() + ", not \"" + experiment +
                       "\": rows are imported only into the experiment that recorded them");
    try {
      for (const auto& corpus : j.at("corpora")) {
        const std::string name = corpus.at("name");
        std::vector<json> rows(corpus.at("rows").begin(), corpus.at("rows").end());
        rows.push_back(corpus.at("base"));
        for (const auto& r : rows) {
          RowResult row = row_from_json(r.dump(), file);
          if (row.key.empty()) throw InputError(where + ": corpus '" + name + "': an unreadable row: " + row.evaluated_with);
          check_windows(row, where);
          // A row imported again keeps the file that first recorded it.
          if (row.imported_from.empty()) row.imported_from = file;
          Key key{name, row.factor, row.key};
          out.rows_[key] = Entry{std::move(row), file};
        }
      }
      out.time_.seconds += j.value("wall_seconds", 0.0);
      out.time_.invocations += j.value("invocations", int64_t{0});
    } catch (const json::exception& e) {
      throw InputError(where + ": " + std::string(e.what()) + "; expected an experiment's results.json");
    }
  }
  return out;
}

const RowResult* ImportedRows::find(const std::string& corpus, int64_t factor, const std::string& key,
                                    const std::map<std::string, json>& settings) const {
  const auto it = rows_.find({corpus, factor, key});
  if (it == rows_.end()) return nullptr;
  const RowResult& row = it->second.row;
  const std::string what = "--import-rows " + it->second.file + ": row '" + row.label + "' (corpus '" + corpus +
                           "', x" + std::to_string(factor) + ")";
  for (const auto& [task, here] : settings) {
    const json mine = settings_only(here);
    json recorded;
    if (task == "perplexity") {
      recorded = settings_only(row.evaluated_with.empty() ? json::object() : json::parse(row.evaluated_with));
    } else {
      const auto t = row.tasks.find(task);
      if (t == row.tasks.end())
        throw InputError(what + " has no " + task + " figures, which this experiment's eval.tasks asks for: " +
                         "evaluate it here (delete the row from that file) or leave the task out");
      recorded = settings_only(json::parse(t->second.with));
    }
    if (recorded != mine)
      throw InputError(what + " was evaluated with other " + task + " settings (" + first_difference(recorded, mine) +
                       "): evaluate it here (delete the row from that file, or the file from --import-rows)");
  }
  return &row;
}

std::vector<std::pair<ImportedRows::Key, std::string>> ImportedRows::unused(const std::set<Key>& used) const {
  std::vector<std::pair<Key, std::string>> out;
  for (const auto& [key, entry] : rows_)
    if (!used.count(key)) out.emplace_back(key, entry.file);
  return out;
}

}  // namespace segtrain::trainer
