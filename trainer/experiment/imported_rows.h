#pragma once
// Rows that another invocation of the same experiment recorded, taken into this one
// (`segtrain experiment FILE --import-rows RESULTS.json`): a grid split across
// machines, or one whose run folders are gone but whose results.json was kept
// (docs/results/), reports them beside its own rows without training or evaluating
// them again. Their evaluation settings are checked, and the grid scores the base row
// itself to check the base and store; how they were trained is taken as recorded.
// The checks of this grid's rows against them are here too (imported_rows, check_same_base,
// check_imports).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "trainer/experiment/experiment.h"
#include "trainer/experiment/plan.h"
#include "trainer/experiment/report.h"

namespace segtrain::trainer {

class ImportedRows {
 public:
  using Key = std::tuple<std::string, int64_t, std::string>;  // corpus, factor, row key

  // Reads each results.json (a later file's row replaces an earlier one's; a file
  // named twice counts once); exit 2 naming the file when it is not a results.json of
  // experiment `experiment` or a row's windows do not fit its lengths.
  static ImportedRows read(const std::vector<std::string>& files, const std::string& experiment);

  // A record found: the row, and whether this grid asks for more perplexity windows
  // than it holds (more_windows.h: its windows are kept and the rest evaluated here).
  struct Found {
    const RowResult* row = nullptr;
    bool more_windows = false;
  };

  // The record of row `key` at `factor` of corpus `corpus` (row nullptr: none). `settings`
  // holds each eval task's settings as this grid records them; the model's folder and
  // files aside (another machine's, or another output folder's), a record measured with
  // other settings (but fewer perplexity windows), or without one of the tasks, is refused
  // (exit 2) naming the difference.
  Found find(const std::string& corpus, int64_t factor, const std::string& key,
             const std::map<std::string, nlohmann::json>& settings) const;

  // The --import-rows file that gave the row find() returns.
  const std::string& file(const std::string& corpus, int64_t factor, const std::string& key) const {
    return rows_.at({corpus, factor, key}).file;
  }

  // The rows not in `used`, each with the file it came from.
  std::vector<std::pair<Key, std::string>> unused(const std::set<Key>& used) const;

  // The wall time the imported grids recorded, summed: where this grid's clock starts
  // when its output folder has none yet.
  GridTime time() const { return time_; }

 private:
  struct Entry {
    RowResult row;
    std::string file;  // as given on the command line (row.imported_from keeps the first file that recorded it)
  };
  std::map<Key, Entry> rows_;
  GridTime time_;
};

// Each row `imports` holds for `corpus`, checked against this grid's settings
// (exit 2 naming the first that differs): by the row's position in plan_rows.
std::map<size_t, ImportedRows::Found> imported_rows(const ExperimentConfig& x, const CorpusSpec& corpus,
                                                    const std::vector<PlannedRow>& rows, const ImportedRows& imports);

// The base row imported must be the base row scored here: the same base, store and
// windows, which the imported rows' settings alone do not show.
// `file`: the --import-rows file it came from.
void check_same_base(const RowResult& here, const RowResult& imported, const std::string& file);

// Every imported row checked against this grid's settings before anything is written
// (run_corpus takes them again); a row that is no row of this grid is named, unused.
void check_imports(const ExperimentConfig& x, const ImportedRows& imports);

}  // namespace segtrain::trainer
