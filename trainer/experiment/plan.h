#pragma once
// Where an experiment keeps each corpus, store, run and row, the run configs it
// derives from the template, and the rows it reports. Shared by the loader (which
// validates every run up front), the import checks and the runner.
#include <filesystem>
#include <string>
#include <vector>

#include "trainer/experiment/experiment.h"
#include "trainer/experiment/report.h"

namespace segtrain::trainer {

namespace fs = std::filesystem;

// <output_dir>/<corpus>/ holds corpus/ (synthetic text), store/, base/ and
// x<f>/<row>/ for each factor f and row.
fs::path corpus_dir(const ExperimentConfig& x, const CorpusSpec& corpus);
std::string store_dir(const ExperimentConfig& x, const CorpusSpec& corpus);
fs::path factor_dir(const ExperimentConfig& x, const CorpusSpec& corpus, int64_t factor);
// "checkpoint:<dir>/base/final", or the corpus's given base.
std::string base_init(const ExperimentConfig& x, const CorpusSpec& corpus);
std::string base_model_dir(const ExperimentConfig& x, const CorpusSpec& corpus);
models::Arch base_arch(const ExperimentConfig& x, const CorpusSpec& corpus);
std::vector<models::ExtensionMethod> ootb_rows(const ExperimentConfig& x, const CorpusSpec& corpus);
models::ExtensionMethod train_extension(const ExperimentConfig& x, const CorpusSpec& corpus);
// The length the base was trained at: L_t for a base the grid pretrains, a given
// base's own (its original length: config.json's max_position_embeddings for hf:).
int64_t base_context(const ExperimentConfig& x, const CorpusSpec& corpus);
// model.extension.factor of every extended row at `factor`: L_e over the base's
// context, at least 1 (a base trained at 8k needs no scaling at L_e = 8k).
double extension_factor(const ExperimentConfig& x, const CorpusSpec& corpus, int64_t factor);
// The lengths every row at `factor` is evaluated at: experiment.eval_lengths, or L_t and L_e.
std::vector<int64_t> row_lengths(const ExperimentConfig& x, int64_t factor);

// Keys the grid sets itself for every run (plan_training_runs sets no other);
// an experiment's `base.set` / `extend.set` may not touch them.
bool is_grid_key(const std::string& key);

struct PlannedRun {
  std::string label;  // "base", "x2/chunk-0.25"
  int64_t factor = 1;
  const TrainedMethod* method = nullptr;  // nullptr for the base
  LoadedConfig config;
};

// The base pretraining run (unless the corpus gives one), then one run per
// factor and trained method, in the order they run.
std::vector<PlannedRun> plan_training_runs(const ExperimentConfig& x, const CorpusSpec& corpus);

// One row of a corpus's report as the grid plans it: what it scores, with which
// overrides, where its record goes, and the training run behind a trained row.
struct PlannedRow {
  RowResult row;  // key, label, kind, factor, lengths, budget
  std::string model_dir;
  std::vector<std::string> overrides;
  fs::path record_dir;
  const PlannedRun* run = nullptr;
};

// The base row at L_t (the OOTB row without a scaling), then per factor the OOTB rows
// and the trained rows, in the order the grid runs them.
std::vector<PlannedRow> plan_rows(const ExperimentConfig& x, const CorpusSpec& corpus,
                                  const std::vector<PlannedRun>& runs);

// A factor as --set takes it: "4", "2.5".
std::string format_factor(double factor);

}  // namespace segtrain::trainer
