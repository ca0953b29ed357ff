// How the grid scores a row (experiment/row_evaluation.h): what a row's record already
// holds, an imported row's model checked before its windows are continued, and each task
// run and recorded as it finishes.
#include "trainer/experiment/row_evaluation.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/log.h"
#include "models/modules/model_io.h"
#include "trainer/config/eval_tasks.h"
#include "trainer/eval/eval_outputs.h"
#include "trainer/eval/perplexity.h"
#include "trainer/eval/stored_model.h"
#include "trainer/experiment/more_windows.h"
#include "trainer/experiment/plan.h"
#include "trainer/runtime/device.h"

namespace segtrain::trainer {

namespace {

// The perplexity options of `row`: the template's eval settings at the row's lengths,
// with the loss by position and by window (the report's intervals are computed from
// each window's blocks).
PerplexityOptions row_perplexity(const ExperimentConfig& x, const RowResult& row) {
  const Config& templ = x.base_template.config;
  // train.loss_chunk_tokens gives the same figures either way: not in the settings.
  PerplexityOptions eval = perplexity_options(templ.eval, templ.train.loss_chunk_tokens);
  eval.lengths = row.lengths;
  eval.per_position = true;
  eval.per_window = true;
  // eval_from_longest: every row and length on the first L tokens of the same windows
  // of the grid's longest length (evaluate() runs one forward a window where the model allows).
  if (x.eval_from_longest)
    for (int64_t f : x.factors) eval.window_length = std::max(eval.window_length, row_lengths(x, f).back());
  return eval;
}

}  // namespace

std::string model_identity(const std::string& dir) {
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file())
      entries.push_back(e.path().filename().string() + ":" + std::to_string(e.file_size()) + ":" +
                        std::to_string(e.last_write_time().time_since_epoch().count()));
  std::sort(entries.begin(), entries.end());
  std::string out;
  for (const auto& e : entries) out += e + ";";
  return out;
}

EvalSuite row_suite(const ExperimentConfig& x, const RowResult& row, int64_t first_window) {
  const Config& templ = x.base_template.config;
  PerplexityOptions eval = row_perplexity(x, row);
  eval.first_window = first_window;
  EvalConfig tasks = templ.eval;
  if (row.kind == "base") std::erase_if(tasks.tasks, [](const std::string& t) { return !scores_windows(t); });
  return EvalSuite(tasks, row.lengths, eval, templ.eval.split, kEvalPromptSeed);
}

std::map<std::string, nlohmann::json> task_settings(const ExperimentConfig& x, const RowResult& row,
                                                    const std::string& model_dir,
                                                    const std::vector<std::string>& overrides) {
  const Config& templ = x.base_template.config;
  // fp32 rows keep the settings they were recorded with before eval.precision existed.
  const bool bf16 = evaluates_in_bf16(templ.eval, templ.train.precision);
  std::map<std::string, nlohmann::json> out;
  const EvalSuite suite = row_suite(x, row);
  for (const auto& task : suite.tasks()) {
    nlohmann::json settings = task->settings();
    settings["model"] = model_dir;
    settings["overrides"] = overrides;
    if (bf16) settings["precision"] = "bf16";
    out[task->name()] = settings;
  }
  return out;
}

namespace {

// What of a row's suite is still to evaluate: the tasks, and for the task that scores
// windows those already recorded, which are kept (more windows asked for since: more_windows.h).
struct RowTodo {
  std::set<std::string> tasks;
  int64_t kept_windows = 0;
};

// The settings, among a row's tasks' (`with`), of the task that scores windows (an
// experiment lists one: read_experiment checks it).
const std::string& window_settings(const std::map<std::string, std::string>& with) {
  for (const auto& [name, settings] : with)
    if (scores_windows(name)) return settings;
  throw std::logic_error("an experiment row's tasks score no windows");
}

// Takes into `row` each task's figures that its record holds with the same settings
// (`with`: each task's settings as JSON), and the perplexity windows of a record that
// asked for fewer; returns what is still to run.
RowTodo tasks_to_run(RowResult& row, const fs::path& record, const EvalSuite& suite,
                     const std::map<std::string, std::string>& with) {
  std::optional<RowResult> saved;
  if (fs::exists(record)) saved = row_from_json(read_file(record, "row record"), record.string());
  RowTodo todo;
  for (const auto& task : suite.tasks()) {
    const std::string& name = task->name();
    if (task->scores_windows() && saved && !saved->evaluated_with.empty() &&
        (saved->evaluated_with == with.at(name) ||
         adds_windows(nlohmann::json::parse(saved->evaluated_with), nlohmann::json::parse(with.at(name))))) {
      row.results = saved->results;
      row.eval_seconds = saved->eval_seconds;
      row.model = saved->model;
      row.evaluated_with = saved->evaluated_with;
      row.imported_from = saved->imported_from;
      row.imported_windows = saved->imported_windows;
      if (saved->evaluated_with != with.at(name)) {
        todo.kept_windows = row.results.empty() ? 0 : row.results.front().sequences;
        todo.tasks.insert(name);
      }
    } else if (!task->scores_windows() && saved && saved->tasks.count(name) &&
               saved->tasks.at(name).with == with.at(name)) {
      row.tasks[name] = saved->tasks.at(name);
    } else {
      todo.tasks.insert(name);
    }
  }
  return todo;
}

// An imported row continued on more windows starts from its record as this grid would
// have written it: its model's folder and files (here) in every task's settings, the
// window task's with the windows it holds. `with`: each task's settings here.
RowResult continued_record(const RowResult& imported, const std::string& model_dir,
                           const std::map<std::string, std::string>& with) {
  RowResult row = imported;
  const auto recorded = nlohmann::json::parse(imported.evaluated_with);
  row.model = model_dir;
  row.evaluated_with =
      with_max_sequences(nlohmann::json::parse(window_settings(with)), recorded.at("max_sequences")).dump();
  for (auto& [name, task] : row.tasks)
    if (with.count(name)) task.with = with.at(name);  // the same settings (ImportedRows::find), this model's names
  row.imported_windows = imported.results.empty() ? 0 : imported.results.front().sequences;
  return row;
}

// An imported row's model rebuilt here must be the one that scored its windows before
// they are joined by this one's: its first window at the row's shortest length (one
// forward of L tokens) within the margin the base row is checked with.
void check_rebuilt_model(models::TransformerLM& model, const RowResult& imported, const ExperimentConfig& x,
                         const data::IndexedDataset& split) {
  PerplexityOptions first = row_perplexity(x, imported);
  first.lengths = {imported.lengths.front()};
  first.max_sequences = 1;
  const LengthResult here = evaluate(model, split, first).front();
  const LengthResult& recorded = imported.results.front();
  const std::string what = "--import-rows " + imported.imported_from + ": row '" + imported.label + "'";
  if (recorded.windows.empty() || here.windows.empty() || recorded.windows.front().doc != here.windows.front().doc ||
      recorded.windows.front().start != here.windows.front().start)
    throw InputError(what + ": its first window is not this store's first held-out window; its windows cannot be "
                            "continued here");
  auto mean = [](const WindowLoss& w, int64_t predictions) {
    double sum = 0;
    for (double block : w.block_nll) sum += block;
    return sum / static_cast<double>(predictions);
  };
  const int64_t predictions = recorded.length - 1;
  const double a = mean(here.windows.front(), predictions), b = mean(recorded.windows.front(), predictions);
  auto digits = [](double v) {
    std::ostringstream out;
    out << std::setprecision(9) << v;
    return out.str();
  };
  log::info("experiment: ", imported.label, " rebuilt here: its first window's mean loss at L = ", recorded.length,
            " is ", digits(a), ", recorded ", digits(b));
  if (!(std::abs(a - b) <= 1e-4))
    throw InputError(what + ": the model rebuilt here scores its first window at L = " + std::to_string(recorded.length) +
                     " to a loss of " + digits(a) + ", recorded " + digits(b) +
                     " (more than 1e-4 apart): the recorded windows are another model's; to score every window "
                     "with this one, delete the row from that file");
}

// What a row's task is about to do: the windows of the row's lengths (after `kept_windows`
// recorded ones), or a prompt task.
void log_row_task(const EvalTask& task, const RowResult& row, const std::string& model_dir, int64_t kept_windows) {
  if (!task.scores_windows()) {
    log::info("experiment: ", task.name(), " of ", row.label, " (", model_dir, ")");
    return;
  }
  log::info("experiment: evaluating ", row.label, " (", model_dir, ") at L = ", row.lengths.front(), "..",
            row.lengths.back(),
            kept_windows > 0 ? " on the windows after the " + std::to_string(kept_windows) + " recorded" : "",
            kept_windows > 0 && row.imported_windows ? " (imported from " + row.imported_from + ")" : "");
}

}  // namespace

RowResult evaluate_row(RowResult row, const fs::path& row_dir, const std::string& model_dir,
                       const std::vector<std::string>& overrides, const ExperimentConfig& x,
                       const std::string& store_path, const data::TokenStore& store,
                       const RowResult* continued) {
  const Config& templ = x.base_template.config;
  const EvalSuite suite = row_suite(x, row);
  const bool bf16 = evaluates_in_bf16(templ.eval, templ.train.precision);
  const std::string files = model_identity(model_dir);
  std::map<std::string, std::string> with;
  for (auto& [name, settings] : task_settings(x, row, model_dir, overrides)) {
    settings["model_files"] = files;
    with[name] = settings.dump();
  }
  const StoredModel stored = open_stored_model(model_dir, overrides, suite.longest());
  const fs::path record = row_dir / "row.json";
  const auto& split = store.split(data::parse_split(templ.eval.split));
  // Rows are evaluated where the template's runs train (run.device).
  const c10::Device device = pick_device(templ.run.device, /*local_rank=*/0);
  std::optional<models::TransformerLM> model;
  auto loaded = [&]() -> models::TransformerLM& {
    if (!model) {
      try {
        check_store_fits(stored, store.vocab_size(), "experiment");
      } catch (const InputError& e) {
        throw InputError(std::string(e.what()) + "; a given base needs a store tokenized with its own tokenizer");
      }
      check_store_tokenizer(store_path, stored.dir, x.file + ": " + row.label,
                            "data.allow_tokenizer_mismatch: true (under experiment.base.set)",
                            templ.data.allow_tokenizer_mismatch);
      model = models::load_model(stored.dir, stored.config);
      (*model)->to(device);
    }
    return *model;
  };
  if (continued && !fs::exists(record)) {
    {
      const Autocast autocast(bf16, device.type());
      check_rebuilt_model(loaded(), *continued, x, split);
    }
    fs::create_directories(row_dir);
    write_file_atomic(record, row_to_json(continued_record(*continued, model_dir, with)));
  }
  const RowTodo todo = tasks_to_run(row, record, suite, with);
  if (todo.tasks.empty()) {
    log::info("experiment: ", row_dir.string(), " is evaluated");
    return row;
  }
  loaded();
  const auto prompts = suite.open_prompts(store_path, split, x.file + ": eval.tasks");
  const TaskData data{&split, prompts ? &*prompts : nullptr};
  // The same suite scoring windows from after the kept ones on (the same settings).
  const EvalSuite todo_suite = row_suite(x, row, todo.kept_windows);
  fs::create_directories(row_dir);
  SuiteRun how;
  how.skip = [&](const EvalTask& task) { return !todo.tasks.count(task.name()); };
  how.on_start = [&](const EvalTask& task) { log_row_task(task, row, model_dir, todo.kept_windows); };
  how.log = false;  // on_result logs each task's figures, a row's kept windows joined
  how.on_result = [&](const EvalTask& task, const std::vector<TaskResult>& results) {
    TaskResult result = results.back();
    if (task.scores_windows()) {
      if (todo.kept_windows > 0) {
        result.perplexity = append_windows(row.results, result.perplexity);
        result.seconds += row.eval_seconds;
      }
      row.results = result.perplexity;
      row.eval_seconds = result.seconds;
      row.model = model_dir;
      row.evaluated_with = with.at(task.name());
      write_file_atomic(row_dir / "eval.json", eval_json(model_dir, {result}));
    } else {
      row.tasks[task.name()] = {result.scores, with.at(task.name()), result.seconds};
    }
    write_file_atomic(record, row_to_json(row));  // each task's figures are kept even if a later one fails
    task.log(result);  // with the kept windows: the row's figures
    log::info("  ", task.name(), " in ", static_cast<int64_t>(results.back().seconds), " s");
  };
  const Autocast autocast(bf16, device.type());
  run_suite(todo_suite, *model, data, how);
  return row;
}

}  // namespace segtrain::trainer
