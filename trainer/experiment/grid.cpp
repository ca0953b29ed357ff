// The experiment grid: corpus -> store -> base -> per factor, OOTB rows and
// trained rows -> results. Each step checks whether its output is already there
// (and made from the same settings) before doing any work.
#include "trainer/experiment/experiment.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iomanip>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "common/atomic_write.h"
#include "common/dir_lock.h"
#include "common/error.h"
#include "common/file_digest.h"
#include "common/file_io.h"
#include "common/log.h"
#include "common/output_path.h"
#include "common/signals.h"
#include "data/corpus.h"
#include "data/prepare.h"
#include "data/prompt_tokenizer.h"
#include "data/synth.h"
#include "data/token_store.h"
#include "models/model_io.h"
#include "models/positions.h"
#include "trainer/config/model_ref.h"
#include "trainer/eval/eval_outputs.h"
#include "trainer/eval/perplexity.h"
#include "trainer/eval/stored_model.h"
#include "trainer/eval/suite.h"
#include "trainer/experiment/imported_rows.h"
#include "trainer/experiment/more_windows.h"
#include "trainer/experiment/plan.h"
#include "trainer/experiment/report.h"
#include "trainer/runtime/device.h"
#include "trainer/train/run_checkpoint.h"
#include "trainer/train/trainer.h"

namespace segtrain::trainer {

namespace {

// The folder whose tokenizer makes the store of a corpus with text and an hf: base;
// "" when the grid trains a sentencepiece model on the text.
std::string base_tokenizer(const CorpusSpec& corpus) {
  const auto ref = parse_model_ref(corpus.base);
  return ref && ref->kind == ModelRef::Kind::hf && corpus.store.empty() ? ref->dir : "";
}

// The corpus settings a store was made from, and for text inputs every file's
// size and content digest; a store made from others (an edited file) is stale.
// FNV-1a, as the stores of published grids recorded it: another digest would make them stale.
nlohmann::json corpus_fingerprint(const CorpusSpec& corpus) {
  nlohmann::json j = {{"vocab_size", corpus.vocab_size}, {"valid_fraction", corpus.valid_fraction}};
  if (const std::string tokenizer = base_tokenizer(corpus); !tokenizer.empty()) {
    // The base's tokenizer replaces a trained one: its files are part of what the store is made from.
    j.erase("vocab_size");
    j["tokenizer"] = {{"base", tokenizer}, {"files", nlohmann::json::array()}};
    for (const char* name : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"})
      if (const fs::path file = fs::path(tokenizer) / name; fs::exists(file))
        j["tokenizer"]["files"].push_back({{"name", name}, {"fnv1a64", file_digest(file, DigestKind::fnv1a64)}});
  }
  if (corpus.synthetic)
    j["synthetic"] = {{"docs", corpus.synthetic->documents},
                      {"min_tokens", corpus.synthetic->min_words},
                      {"max_tokens", corpus.synthetic->max_words},
                      {"seed", static_cast<int64_t>(corpus.synthetic->seed)}};
  else {
    j["inputs"] = corpus.inputs;
    j["files"] = nlohmann::json::array();
    for (const auto& file : data::corpus_files(corpus.inputs))
      j["files"].push_back({{"path", file.path.string()},
                            {"bytes", static_cast<int64_t>(fs::file_size(file.path))},
                            {"fnv1a64", file_digest(file.path, DigestKind::fnv1a64)}});
  }
  return j;
}

// What changed between a recorded corpus fingerprint and today's, in a few words.
std::string first_difference(const nlohmann::json& recorded, const nlohmann::json& now) {
  for (const auto& [key, value] : now.items()) {
    if (!recorded.contains(key)) return key + " was not recorded";
    if (recorded[key] == value) continue;
    if (key != "files" || !recorded[key].is_array()) return key + " was " + recorded[key].dump() + ", is " + value.dump();
    std::map<std::string, nlohmann::json> before;
    for (const auto& f : recorded[key]) before[f.value("path", "")] = f;
    for (const auto& f : value) {
      const auto it = before.find(f["path"].get<std::string>());
      if (it == before.end()) return f["path"].get<std::string>() + " is new";
      if (it->second != f) return f["path"].get<std::string>() + " changed";
      before.erase(it);
    }
    if (!before.empty()) return before.begin()->first + " is gone";
  }
  return "recorded with other settings";
}

void ensure_store(const ExperimentConfig& x, const CorpusSpec& corpus, const LoadedConfig& base_template) {
  if (!corpus.store.empty()) return;
  const fs::path dir = corpus_dir(x, corpus);
  const fs::path store = store_dir(x, corpus), made_from = dir / "corpus.json";
  const nlohmann::json fingerprint = corpus_fingerprint(corpus);
  if (fs::exists(store / "meta.json") && fs::exists(made_from)) {
    const auto recorded = nlohmann::json::parse(read_file(made_from, "corpus record"));
    if (recorded != fingerprint)
      throw InputError(corpus.origin + ": experiment.corpora '" + corpus.name + "' differs from the corpus " +
                       store.string() + " was made from (" + made_from.string() + ": " +
                       first_difference(recorded, fingerprint) + "); every run of it would be stale: delete " +
                       dir.string() + " or choose another experiment.output_dir");
    return;
  }
  // The corpus text and the store are built beside their places and renamed in
  // (AtomicDir); what a killed build leaves is a .tmp- sibling, removed here. A
  // stop requested meanwhile takes effect once the store is in place.
  fs::create_directories(dir);
  std::vector<fs::path> leftovers;
  for (const auto& entry : fs::directory_iterator(dir))
    if (is_incomplete_write(entry.path())) leftovers.push_back(entry.path());
  for (const auto& path : leftovers) fs::remove_all(path);
  std::vector<std::string> inputs = corpus.inputs;
  if (corpus.synthetic) {
    // Written afresh with the store (it takes seconds), so it always matches the fingerprint.
    AtomicDir text(dir / "corpus");
    log::info("experiment ", corpus.name, ": writing the synthetic corpus");
    data::write_synth_corpus(text.path().string(), *corpus.synthetic);
    text.commit();
    inputs = {(text.final_path() / "train.jsonl").string(), (text.final_path() / "valid.jsonl").string()};
  }
  AtomicDir staged_store(store);
  data::PrepareOptions p;
  p.inputs = inputs;
  p.out = staged_store.path().string();
  p.vocab_size = corpus.vocab_size;
  p.tokenizer = base_tokenizer(corpus);
  p.valid_fraction = corpus.valid_fraction;
  p.seed = base_template.config.run.seed;
  log::info("experiment ", corpus.name, ": tokenizing into ", store.string());
  data::prepare_store(p);
  staged_store.commit();
  write_file_atomic(made_from, fingerprint.dump(2) + "\n");
}

// Names, sizes and write times of a model folder's files: a base trained
// again in the same place has another identity, so nothing built on the old
// one is reused.
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

// The grid's evaluation suite for `row`: the template's eval.tasks at the row's
// lengths, perplexity from window `first_window` on (the earlier ones kept from the
// row's record). The base row at L_t is the OOTB row without a scaling: its prompt
// tasks would repeat that row's.
EvalSuite row_suite(const ExperimentConfig& x, const RowResult& row, int64_t first_window = 0) {
  const Config& templ = x.base_template.config;
  PerplexityOptions eval = row_perplexity(x, row);
  eval.first_window = first_window;
  EvalConfig tasks = templ.eval;
  if (row.kind == "base") std::erase_if(tasks.tasks, [](const std::string& t) { return !scores_windows(t); });
  return EvalSuite(tasks, row.lengths, eval, templ.eval.split, kEvalPromptSeed);
}

// Each task of `row`'s suite with the settings its figures are recorded with (the
// model folder's files aside: evaluate_row adds their identity).
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

// Evaluates one row's model: each task of the suite unless row.json holds its
// figures from the same settings; each is reused on its own, so adding a task
// to a finished grid runs that task alone, and asking for more windows scores
// only the new ones. `continued`: an imported row whose windows this one keeps
// (its model rebuilt here), or nullptr.
RowResult evaluate_row(RowResult row, const fs::path& row_dir, const std::string& model_dir,
                       const std::vector<std::string>& overrides, const ExperimentConfig& x,
                       const std::string& store_path, const data::TokenStore& store,
                       const RowResult* continued = nullptr) {
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

RowResult new_row(std::string key, std::string label, std::string kind, int64_t factor, std::vector<int64_t> lengths) {
  RowResult row;
  row.key = std::move(key);
  row.label = std::move(label);
  row.kind = std::move(kind);
  row.factor = factor;
  row.lengths = std::move(lengths);
  return row;
}

// A factor as --set takes it: "4", "2.5".
std::string format_factor(double factor) {
  std::ostringstream out;
  out << std::setprecision(12) << factor;
  return out.str();
}

std::string extension_override(models::ExtensionMethod method) {
  return std::string("model.extension.method=") + enum_name(models::kExtensionMethods, method);
}

std::string ootb_label(const ExperimentConfig& x, const CorpusSpec& corpus, models::ExtensionMethod method) {
  const bool learned = models::position_scheme(base_arch(x, corpus)) == models::PositionScheme::learned;
  if (method == models::ExtensionMethod::none) return "OOTB";
  // Seed 004's APE OOTB row is the interpolated table.
  if (learned && method == models::ExtensionMethod::interpolate) return "OOTB";
  return std::string("OOTB ") + enum_name(models::kExtensionMethods, method);
}

// The grid's wall time across invocations, kept in <output_dir>/wall_time.json:
// what this invocation has spent so far plus what earlier ones recorded.
class GridClock {
 public:
  // `imported`: the time of the grids whose rows this one imports, where it starts
  // when `file` is not there yet.
  GridClock(const fs::path& file, GridTime imported)
      : file_(file), started_(std::chrono::steady_clock::now()), before_(imported) {
    if (!fs::exists(file_)) return;
    try {
      const auto j = nlohmann::json::parse(read_file(file_, "grid wall time"));
      before_ = {j.at("seconds").get<double>(), j.at("invocations").get<int64_t>()};
    } catch (const std::exception&) {
      log::warn("experiment: ", file_.string(), " is unreadable; the wall time starts again from this run");
    }
  }
  GridTime now() const {
    return {before_.seconds + std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count(),
            before_.invocations + 1};
  }
  void save() const {
    const GridTime t = now();
    write_file_atomic(file_, nlohmann::json{{"seconds", t.seconds}, {"invocations", t.invocations}}.dump() + "\n");
  }
  ~GridClock() {
    try {
      save();
    } catch (const std::exception&) {
    }
  }

 private:
  fs::path file_;
  std::chrono::steady_clock::time_point started_;
  GridTime before_;
};

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
                                  const std::vector<PlannedRun>& runs) {
  const int64_t lt = x.base_template.config.data.train_length;
  const std::string base = base_model_dir(x, corpus);
  std::vector<PlannedRow> rows;
  rows.push_back({new_row("base", "base at L_t", "base", 1, {lt}), base, {}, corpus_dir(x, corpus) / "base-eval"});
  for (int64_t factor : x.factors) {
    const std::string factor_set = "model.extension.factor=" + format_factor(extension_factor(x, corpus, factor));
    for (auto method : ootb_rows(x, corpus)) {
      PlannedRow p{new_row("ootb-" + std::string(enum_name(models::kExtensionMethods, method)),
                           ootb_label(x, corpus, method), "ootb", factor, row_lengths(x, factor)),
                   base, {}, {}};
      if (method != models::ExtensionMethod::none) p.overrides = {extension_override(method), factor_set};
      p.record_dir = factor_dir(x, corpus, factor) / p.row.key;
      rows.push_back(std::move(p));
    }
    for (const auto& run : runs) {
      if (run.factor != factor || !run.method) continue;
      const TrainedMethod& m = *run.method;
      const std::string label = m.domain_adaptation ? "DA" + m.name.substr(2) : m.name;  // "DA", "DA@262144"
      const fs::path run_dir = run.config.config.run.output_dir;
      PlannedRow p{new_row(m.name, label, "trained", factor, row_lengths(x, factor)), (run_dir / "final").string(),
                   {}, run_dir, &run};
      p.row.budget = m.budget.value_or(0);
      p.row.variant_of = m.variant_of;
      const auto ootb_extension = default_train_extension(base_arch(x, corpus));
      if (m.domain_adaptation && ootb_extension != models::ExtensionMethod::none)
        p.overrides = {extension_override(ootb_extension), factor_set};
      rows.push_back(std::move(p));
    }
  }
  return rows;
}

// Each row `imports` holds for `corpus`, checked against this grid's settings
// (exit 2 naming the first that differs): by the row's position in plan_rows.
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

// The base row imported must be the base row scored here: the same base, store and
// windows, which the imported rows' settings alone do not show.
// `file`: the --import-rows file it came from.
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

// Every imported row checked against this grid's settings before anything is written
// (run_corpus takes them again); a row that is no row of this grid is named, unused.
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
