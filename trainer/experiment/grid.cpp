// The experiment grid: corpus -> store -> base -> per factor, OOTB rows and
// trained rows -> results. Each step checks whether its output is already there
// (and made from the same settings) before doing any work: the store
// (corpus_store.h), each training run (here), each row's evaluation (row_evaluation.h).
#include "trainer/experiment/experiment.h"

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "common/atomic_write.h"
#include "common/dir_lock.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/log.h"
#include "common/output_path.h"
#include "common/signals.h"
#include "data/token_store.h"
#include "trainer/config/model_ref.h"
#include "trainer/experiment/corpus_store.h"
#include "trainer/experiment/grid_clock.h"
#include "trainer/experiment/imported_rows.h"
#include "trainer/experiment/plan.h"
#include "trainer/experiment/report.h"
#include "trainer/experiment/row_evaluation.h"
#include "trainer/train/run_checkpoint.h"
#include "trainer/train/trainer.h"

namespace segtrain::trainer {

namespace {

// Trains one run unless its final/ is there; a run with checkpoints continues.
// Either way its checkpoint must come from exactly these settings and this base.
void ensure_trained(const PlannedRun& run) {
  const fs::path dir = run.config.config.run.output_dir;
  const auto previous = newest_checkpoint(dir);
  const fs::path base_record = dir / "base_identity.txt";
  const std::string base = run.method ? model_identity(model_ref_dir(run.config.config.model.init)) : "";
  if (previous && run.method && (!fs::exists(base_record) || read_file(base_record, "base identity record") != base))
    throw InputError("the experiment's run '" + run.label + "' in " + dir.string() + " was trained from another base (" +
                     model_ref_dir(run.config.config.model.init) + " has changed since): delete " + dir.string() +
                     " to train it again");
  if (previous) {
    try {
      check_resume_compatible(previous->dir, run.config.config, 1, keys_with(KeyRole::optimizer));
    } catch (const InputError& e) {
      throw InputError(std::string(e.what()) + "\nthe experiment's run '" + run.label + "' was trained with other " +
                       "settings: delete " + dir.string() + " to train it again");
    }
  }
  if (fs::exists(dir / "final" / "model_config.json")) {
    log::info("experiment: ", run.config.config.run.name, " is trained (", (dir / "final").string(), ")");
    return;
  }
  log::info("experiment: ", previous ? "continuing " : "training ", run.config.config.run.name);
  // The row's lock first: the folder is then a run directory that train continues.
  const DirectoryLock row_lock = DirectoryLock::hold(dir, "run.output_dir", "segtrain experiment");
  if (run.method) write_file_atomic(base_record, base);
  run_training(run.config, previous ? Resume::required : Resume::no, /*final_eval=*/false);
}

// The corpus's rows, calling `row_done` with what is finished after every row (the
// reports are rewritten then: a study of hours shows its rows as they come).
CorpusResults run_corpus(const ExperimentConfig& x, const CorpusSpec& corpus, const ImportedRows& imports,
                         const std::function<void(const CorpusResults&)>& row_done) {
  ensure_store(x, corpus, x.base_template);
  throw_if_stopped();
  // The store's tokenizer writes the tasks' prompts: refused now (exit 2), not after hours of training.
  for (int64_t factor : x.factors) {
    RowResult probe;
    probe.lengths = row_lengths(x, factor);
    const data::TokenStore store = data::TokenStore::open(store_dir(x, corpus));
    row_suite(x, probe).open_prompts(store_dir(x, corpus),
                                     store.split(data::parse_split(x.base_template.config.eval.split)),
                                     x.file + ": eval.tasks: corpus '" + corpus.name + "'");
  }
  const auto runs = plan_training_runs(x, corpus);
  const auto rows = plan_rows(x, corpus, runs);
  const auto imported = imported_rows(x, corpus, rows, imports);
  if (corpus.base.empty()) ensure_trained(runs.front());
  throw_if_stopped();

  const data::TokenStore store = data::TokenStore::open(store_dir(x, corpus));
  CorpusResults out;
  out.name = corpus.name;
  out.store = store_dir(x, corpus);
  out.train_length = x.base_template.config.data.train_length;
  out.factors = x.factors;
  out.arch = enum_name(models::kArchs, base_arch(x, corpus));
  for (size_t i = 0; i < rows.size(); ++i) {
    throw_if_stopped();
    const PlannedRow& p = rows[i];
    const auto import = imported.find(i);
    // Where a grid of hours stands, row by row (the rows' own training and scoring log their progress).
    log::info("experiment: ", corpus.name, " row ", i + 1, " of ", rows.size(), ": ", p.row.label,
              p.row.kind == "base" ? "" : " at x" + std::to_string(p.row.factor),
              import == imported.end()         ? (p.run ? " (trained unless done, then scored)" : " (scored)")
              : !import->second.more_windows ? " (imported)"
              : p.row.kind == "base"           ? " (imported; scored here on every window)"
              : p.run ? " (imported; trained unless done, then scored on the windows it lacks)"
                      : " (imported; scored on the windows it lacks)");
    if (p.row.kind == "base") {
      // Scored here even when imported (seconds): it checks the imported rows' base and store.
      out.base = evaluate_row(p.row, p.record_dir, p.model_dir, p.overrides, x, store_dir(x, corpus), store);
      if (import != imported.end()) {
        check_same_base(out.base, *import->second.row, imports.file(corpus.name, 1, "base"));
        if (!import->second.more_windows) out.base = *import->second.row;
      }
      continue;
    }
    if (import != imported.end() && !import->second.more_windows) {
      log::info("experiment: ", p.row.label, " at x", p.row.factor, " imported from ", import->second.row->imported_from);
      out.rows.push_back(*import->second.row);
    } else {
      // An imported row asked for more windows keeps its own and gets the rest from its model,
      // trained here unless its run is (the same training: check_rebuilt_model).
      const RowResult* continued = import != imported.end() ? import->second.row : nullptr;
      RowResult row = p.row;
      if (p.run) {
        ensure_trained(*p.run);
        throw_if_stopped();
        const TrainerState trained = newest_checkpoint(p.run->config.config.run.output_dir)->state;
        row.train_tokens = trained.tokens;
        row.train_seconds = trained.train_seconds.value_or(0.0);
      }
      out.rows.push_back(
          evaluate_row(row, p.record_dir, p.model_dir, p.overrides, x, store_dir(x, corpus), store, continued));
    }
    row_done(out);
  }
  return out;
}

}  // namespace

void render_experiment(ExperimentConfig x, const std::string& results, const std::string& out) {
  if (!out.empty()) x.output_dir = out;
  const RecordedGrid grid = read_results(results);
  if (grid.experiment != x.name)
    throw InputError("--render " + results + ": records experiment \"" + grid.experiment + "\", not \"" + x.name +
                     "\": a report is written again only with the experiment file that made it");
  // Only the reports go there: a grid's folder (rows, runs) is left to `segtrain experiment` itself.
  const std::string where = out.empty() ? "experiment.output_dir" : "--out";
  check_output_folder(x.output_dir, where, "the re-written report", [](const fs::path& p) {
    const std::string name = p.filename().string();
    return name == "results.md" || name == "results.json" || name == "plots";
  });
  check_output_is_no_input(fs::path(x.output_dir) / "results.json", where, {{results, "--render"}});
  write_reports(x, grid.corpora, grid.time);
  log::info("experiment ", x.name, ": wrote ", (fs::path(x.output_dir) / "results.md").string(), " from ", results,
            " (", grid.corpora.size(), " corpora; nothing trained or evaluated)");
}

void run_experiment(const ExperimentConfig& x) {
  if (const char* world = std::getenv("WORLD_SIZE"); world && std::string(world) != "1")
    throw InputError("WORLD_SIZE=" + std::string(world) +
                     ": `segtrain experiment` runs its grid in one process; launch single runs with segtrain-launch");
  // Refused before anything is written.
  const ImportedRows imports = ImportedRows::read(x.import_rows, x.name);
  check_imports(x, imports);
  const bool is_grid = fs::exists(fs::path(x.output_dir) / DirectoryLock::kFileName);
  check_output_folder(x.output_dir, "experiment.output_dir", "an experiment", [is_grid](const fs::path&) { return is_grid; });
  const DirectoryLock lock = DirectoryLock::hold(x.output_dir, "experiment.output_dir", "segtrain experiment");
  if (!lock.warning().empty()) log::warn(lock.warning());
  const log::ScopedFile experiment_log((fs::path(x.output_dir) / "experiment.log").string());
  log::info("experiment ", x.name, ": ", x.corpora.size(), " corpora x ", x.factors.size(), " factors; writing ",
            x.output_dir);
  const GridClock clock(fs::path(x.output_dir) / "wall_time.json", imports.time());
  std::vector<CorpusResults> corpora;
  // A grid killed later keeps the time and the tables of every row it finished.
  auto row_done = [&](const CorpusResults& partial) {
    clock.save();
    auto so_far = corpora;
    so_far.push_back(partial);
    write_reports(x, so_far, clock.now());
  };
  for (const auto& corpus : x.corpora) {
    corpora.push_back(run_corpus(x, corpus, imports, row_done));
    // Tables so far are worth having even if a later corpus fails.
    write_reports(x, corpora, clock.now());
  }
  clock.save();
  log::info("experiment ", x.name, ": wrote ", (fs::path(x.output_dir) / "results.md").string(), "; wall time ",
            static_cast<int64_t>(clock.now().seconds), " s over ", clock.now().invocations, " run(s)");
}

}  // namespace segtrain::trainer
