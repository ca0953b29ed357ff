#pragma once
// An experiment's results: one record per evaluated row (row.json in the row's
// folder, so a resumed grid reads what it already has), and the reports made
// from all of them: results.json, results.md (Karypis et al.'s Tables 3-5: rows are
// methods, columns are extension lengths) and per-position loss plots.
// The records and write_reports: results_record.cpp; results.md: report_sections.cpp
// with report_tables.h; the plots: report_plots.h.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainer/eval/perplexity.h"
#include "trainer/eval/task.h"
#include "trainer/experiment/experiment.h"

namespace segtrain::trainer {

// A prompt task's figures for one row (eval.tasks), recorded with the settings they
// were measured with, so that adding a task to a finished grid scores nothing else again.
struct RecordedTask {
  std::vector<TaskScore> scores;
  std::string with;  // settings as JSON
  double seconds = 0;
};

struct RowResult {
  std::string key;    // folder name: "ootb-ntk", "chunk-0.25", "base"
  std::string label;  // table row: "OOTB ntk", "chunk-0.25", "DA"
  std::string kind;   // "base" | "ootb" | "trained"
  int64_t factor = 1;
  std::vector<int64_t> lengths;  // evaluated: L_t and L_e = factor * L_t
  std::vector<LengthResult> results;
  std::string model;           // the model folder evaluated
  std::string evaluated_with;  // settings (model, overrides, windows) as JSON: equal means reusable
  int64_t train_tokens = 0;    // trained rows: tokens seen in training
  int64_t budget = 0;          // a point of a method's budget curve: its budget; 0: the experiment's
  std::string variant_of;      // a row of experiment.variants: the key of the row it varies
  std::vector<std::string> variant_versus;  // and the keys of more rows it is compared with
  double train_seconds = 0;    // trained rows: the run's training loop (trainer_state.json); 0: not recorded
  double eval_seconds = 0;     // wall time of the perplexity evaluation
  // Every prompt task measured, by name ("passkey", "niah_single", ...).
  std::map<std::string, RecordedTask> tasks;
  // The results.json this row was imported from (--import-rows); empty: this grid's own.
  std::string imported_from;
  // With imported_from: how many of its perplexity windows came from there, the rest
  // scored here by its model rebuilt (more_windows.h); 0: every window came from there.
  int64_t imported_windows = 0;
};

// The grid's wall time over every invocation (a resumed grid adds to it).
struct GridTime {
  double seconds = 0;
  int64_t invocations = 0;
};

struct CorpusResults {
  std::string name, store, arch;
  int64_t train_length = 0;
  std::vector<int64_t> factors;
  RowResult base;
  std::vector<RowResult> rows;
};

std::string row_to_json(const RowResult& row);
RowResult row_from_json(const std::string& text, const std::string& source);

// What an experiment's results.json records (the inverse of write_reports' results.json): its
// corpora and rows and the grid's time, for writing its reports again with this version's report
// code (`segtrain experiment FILE --render RESULTS.json`). InputError naming the file when it is
// not an experiment's results.json.
struct RecordedGrid {
  std::string experiment;
  std::vector<CorpusResults> corpora;
  GridTime time;
};
RecordedGrid read_results(const std::string& file);

// Writes results.json, results.md and plots/<corpus>-x<f>.svg in the output folder.
void write_reports(const ExperimentConfig& x, const std::vector<CorpusResults>& corpora, const GridTime& time = {});

// results.md's text (tests read it without touching the disk).
std::string results_markdown(const ExperimentConfig& x, const std::vector<CorpusResults>& corpora,
                             const GridTime& time = {});

}  // namespace segtrain::trainer
