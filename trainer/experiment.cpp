// The experiment grid: corpus -> store -> base -> per factor, OOTB rows and
// trained rows -> results. Each step checks whether its output is already there
// (and made from the same settings) before doing any work.
#include "trainer/experiment.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/log.h"
#include "data/token_store.h"
#include "models/model_io.h"
#include "models/positions.h"
#include "trainer/checkpoint.h"
#include "trainer/evaluate.h"
#include "trainer/experiment_plan.h"
#include "trainer/experiment_report.h"
#include "trainer/model_overrides.h"
#include "trainer/model_setup.h"
#include "trainer/passkey.h"
#include "trainer/signals.h"
#include "trainer/train.h"

namespace segtrain::trainer {

// --- layout and run configs ----------------------------------------------------

fs::path corpus_dir(const ExperimentConfig& x, const CorpusSpec& corpus) { return fs::path(x.output_dir) / corpus.name; }

std::string store_dir(const ExperimentConfig& x, const CorpusSpec& corpus) {
  return corpus.store.empty() ? (corpus_dir(x, corpus) / "store").string() : corpus.store;
}

fs::path factor_dir(const ExperimentConfig& x, const CorpusSpec& corpus, int64_t factor) {
  return corpus_dir(x, corpus) / ("x" + std::to_string(factor));
}

std::string base_init(const ExperimentConfig& x, const CorpusSpec& corpus) {
  return corpus.base.empty() ? "checkpoint:" + (corpus_dir(x, corpus) / "base" / "final").string() : corpus.base;
}

std::string base_model_dir(const ExperimentConfig& x, const CorpusSpec& corpus) {
  return init_dir(base_init(x, corpus));
}

models::Arch base_arch(const ExperimentConfig& x, const CorpusSpec& corpus) {
  return corpus.base.empty() ? x.base_template.config.model.spec.arch
                             : models::read_model_config(init_dir(corpus.base)).arch;
}

std::vector<models::ExtensionMethod> ootb_rows(const ExperimentConfig& x, const CorpusSpec& corpus) {
  return x.ootb.empty() ? ootb_methods_for(base_arch(x, corpus)) : x.ootb;
}

models::ExtensionMethod train_extension(const ExperimentConfig& x, const CorpusSpec& corpus) {
  return x.train_extension.value_or(default_train_extension(base_arch(x, corpus)));
}

namespace {

// Sets a key the grid owns, recording where it came from for error messages.
template <class T>
void grid_set(LoadedConfig& run, const std::string& key, T& field, const T& value, const std::string& label) {
  field = value;
  run.origins[key] = run.source + " (experiment grid, run " + label + ")";
}

void apply_assignments(LoadedConfig& run, const std::vector<Assignment>& assignments) {
  for (const auto& a : assignments) {
    try {
      apply_override(run, a.text);
    } catch (const InputError& e) {
      throw InputError(a.origin + ": " + e.what());
    }
    run.origins[a.text.substr(0, a.text.find('='))] = a.origin;
  }
}

}  // namespace

std::vector<PlannedRun> plan_training_runs(const ExperimentConfig& x, const CorpusSpec& corpus) {
  std::vector<PlannedRun> runs;
  const int64_t lt = x.base_template.config.data.train_length;
  const std::string store = store_dir(x, corpus);
  if (corpus.base.empty()) {
    PlannedRun base{"base", 1, nullptr, x.base_template};
    LoadedConfig& r = base.config;
    apply_assignments(r, x.base_set);
    Config& c = r.config;
    grid_set(r, "run.output_dir", c.run.output_dir, (corpus_dir(x, corpus) / "base").string(), "base");
    grid_set(r, "run.name", c.run.name, x.name + "/" + corpus.name + "/base", "base");
    grid_set(r, "data.store", c.data.store, store, "base");
    grid_set(r, "data.extended_length", c.data.extended_length, lt, "base");
    grid_set(r, "data.sampler.method", c.data.sampler.method, data::SamplerMethod::truncate, "base");
    grid_set(r, "model.extension.method", c.model.spec.extension.method, models::ExtensionMethod::none, "base");
    grid_set(r, "eval.lengths", c.eval.lengths, std::vector<int64_t>{lt}, "base");
    runs.push_back(std::move(base));
  }
  for (int64_t factor : x.factors)
    for (const auto& method : x.methods) {
      const std::string label = "x" + std::to_string(factor) + "/" + method.name;
      PlannedRun run{label, factor, &method, x.base_template};
      LoadedConfig& r = run.config;
      // The shape comes from the base: the template's model keys describe a
      // scratch base (validated with it) and must not be compared against a given one.
      Config& c = r.config;
      models::ModelConfig shape_of_the_base;
      shape_of_the_base.arch = base_arch(x, corpus);
      shape_of_the_base.activation_checkpointing = c.model.spec.activation_checkpointing;
      c.model.spec = shape_of_the_base;
      for (const char* key : {"model.arch", "model.vocab_size", "model.d_model", "model.n_layers", "model.n_heads",
                              "model.d_ff", "model.max_positions", "model.layer_norm_eps", "model.rope.theta",
                              "model.rope.rotary_pct"})
        r.origins.erase(key);
      apply_assignments(r, x.extend_set);
      grid_set(r, "run.output_dir", c.run.output_dir, (factor_dir(x, corpus, factor) / method.name).string(), label);
      grid_set(r, "run.name", c.run.name, x.name + "/" + corpus.name + "/" + label, label);
      grid_set(r, "model.init", c.model.init, base_init(x, corpus), label);
      grid_set(r, "data.store", c.data.store, store, label);
      grid_set(r, "data.extended_length", c.data.extended_length, factor * lt, label);
      grid_set(r, "data.sampler.method", c.data.sampler.method,
               method.domain_adaptation ? data::SamplerMethod::truncate : method.sampler, label);
      grid_set(r, "data.sampler.alpha", c.data.sampler.alpha, method.alpha, label);
      // DA trains at L_t on the positions the base knows; it is extended only
      // when evaluated, like the OOTB rows.
      const auto extension = method.domain_adaptation ? models::ExtensionMethod::none : train_extension(x, corpus);
      grid_set(r, "model.extension.method", c.model.spec.extension.method, extension, label);
      std::optional<double> factor_value;
      if (extension != models::ExtensionMethod::none) factor_value = static_cast<double>(factor);
      grid_set(r, "model.extension.factor", c.model.spec.extension.factor, factor_value, label);
      // Every trained row sees the same number of tokens (seed 004, eq. 2).
      grid_set(r, "train.budget.compute_equivalent", c.train.budget.compute_equivalent, true, label);
      c.train.budget.tokens.reset();
      grid_set(r, "eval.lengths", c.eval.lengths, std::vector<int64_t>{lt}, label);
      runs.push_back(std::move(run));
    }
  return runs;
}

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void check_stop() {
  if (int signal = stop_signal()) throw Interrupted(signal);
}

// The corpus settings a store was made from; a store made from others is stale.
nlohmann::json corpus_fingerprint(const CorpusSpec& corpus) {
  nlohmann::json j = {{"vocab_size", corpus.vocab_size}, {"valid_fraction", corpus.valid_fraction}};
  if (corpus.synthetic)
    j["synthetic"] = {{"docs", corpus.synthetic->docs},
                      {"min_tokens", corpus.synthetic->min_tokens},
                      {"max_tokens", corpus.synthetic->max_tokens},
                      {"seed", corpus.synthetic->seed}};
  else
    j["inputs"] = corpus.inputs;
  return j;
}

void ensure_store(const ExperimentConfig& x, const CorpusSpec& corpus, const LoadedConfig& base_template) {
  if (!corpus.store.empty()) return;
  const fs::path dir = corpus_dir(x, corpus);
  const fs::path store = store_dir(x, corpus), made_from = dir / "corpus.json";
  const nlohmann::json fingerprint = corpus_fingerprint(corpus);
  if (fs::exists(store / "meta.json") && fs::exists(made_from)) {
    if (nlohmann::json::parse(read_text(made_from)) != fingerprint)
      throw InputError(corpus.origin + ": experiment.corpora '" + corpus.name + "' differs from the corpus " +
                       store.string() + " was made from (" + made_from.string() +
                       "); every run of it would be stale: delete " + dir.string() +
                       " or choose another experiment.output_dir");
    return;
  }
  fs::create_directories(dir);
  // The store is built beside its place and renamed in: a killed prepare leaves
  // only a .partial folder that the next attempt replaces.
  install_exit_handlers();
  std::vector<std::string> inputs = corpus.inputs;
  if (corpus.synthetic) {
    // Written afresh with the store (it takes seconds), so it always matches the fingerprint.
    const fs::path text = dir / "corpus", partial = dir / "corpus.partial";
    fs::remove_all(partial);
    SynthOptions o = *corpus.synthetic;
    o.out = partial.string();
    log::info("experiment ", corpus.name, ": writing the synthetic corpus");
    cmd_synth(o);
    fs::remove_all(text);
    fs::rename(partial, text);
    inputs = {(text / "train.jsonl").string(), (text / "valid.jsonl").string()};
  }
  const fs::path partial = dir / "store.partial";
  fs::remove_all(partial);
  PrepareOptions p;
  p.inputs = inputs;
  p.out = partial.string();
  p.vocab_size = corpus.vocab_size;
  p.valid_fraction = corpus.valid_fraction;
  p.seed = base_template.config.run.seed;
  log::info("experiment ", corpus.name, ": tokenizing into ", store.string());
  cmd_prepare(p);
  fs::remove_all(store);
  fs::rename(partial, store);
  write_file_atomic(made_from, fingerprint.dump(2) + "\n");
  install_stop_handlers();
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
void ensure_trained(const PlannedRun& run, const fs::path& experiment_log) {
  const fs::path dir = run.config.config.run.output_dir;
  const auto previous = newest_checkpoint(dir);
  const fs::path base_record = dir / "base_identity.txt";
  const std::string base = run.method ? model_identity(init_dir(run.config.config.model.init)) : "";
  if (previous && run.method && (!fs::exists(base_record) || read_text(base_record) != base))
    throw InputError("the experiment's run '" + run.label + "' in " + dir.string() + " was trained from another base (" +
                     init_dir(run.config.config.model.init) + " has changed since): delete " + dir.string() +
                     " to train it again");
  if (previous) {
    try {
      check_resume_compatible(previous->dir, run.config.config, 1,
                              {"train.lr", "train.min_lr", "train.warmup_steps", "train.schedule", "train.weight_decay",
                               "train.no_decay", "train.betas", "train.eps", "train.grad_clip"});
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
  if (run.method) {
    fs::create_directories(dir);
    write_file_atomic(base_record, base);
  }
  run_training(run.config, previous.has_value(), /*final_eval=*/false);
  log::Options restore;  // run_training logs into the run's train.log
  restore.file = experiment_log.string();
  log::init(restore);
}

// Evaluates one row's model unless row.json holds this exact evaluation.
RowResult evaluate_row(RowResult row, const fs::path& row_dir, const std::string& model_dir,
                       const std::vector<std::string>& overrides, const Config& templ, const data::TokenStore& store) {
  PerplexityOptions eval;
  eval.lengths = row.lengths;
  eval.max_sequences = templ.eval.max_sequences;
  eval.stride = templ.eval.stride;
  eval.batch_size = templ.eval.batch_size;
  eval.per_position = true;
  const nlohmann::json settings = {{"model", model_dir},     {"model_files", model_identity(model_dir)},
                                   {"overrides", overrides},
                                   {"lengths", eval.lengths}, {"max_sequences", eval.max_sequences},
                                   {"stride", eval.stride},   {"split", templ.eval.split}};
  const fs::path record = row_dir / "row.json";
  if (fs::exists(record)) {
    if (auto saved = row_from_json(read_text(record), record.string()); saved.evaluated_with == settings.dump()) {
      log::info("experiment: ", row_dir.string(), " is evaluated");
      return saved;
    }
  }
  const int64_t longest = *std::max_element(eval.lengths.begin(), eval.lengths.end());
  const models::ModelConfig config = apply_model_overrides(models::read_model_config(model_dir), overrides, longest);
  if (store.vocab_size() > models::vocab_size_of(config))
    throw InputError("experiment: the store's vocabulary (" + std::to_string(store.vocab_size()) +
                     ") is larger than the model's (" + std::to_string(models::vocab_size_of(config)) + ", " + model_dir +
                     "); a given base needs a store tokenized with its own tokenizer");
  models::TransformerLM model = models::load_model(model_dir, config);
  log::info("experiment: evaluating ", row.label, " (", model_dir, ") at L = ", eval.lengths.front(), "..", longest);
  row.results = evaluate(model, store.split(data::parse_split(templ.eval.split)), eval);
  row.model = model_dir;
  row.evaluated_with = settings.dump();
  fs::create_directories(row_dir);
  write_file_atomic(row_dir / "eval.json", eval_json(model_dir, row.results));
  write_file_atomic(record, row_to_json(row));
  for (const auto& r : row.results) log::info("  L=", r.length, ": ppl ", r.ppl);
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

CorpusResults run_corpus(const ExperimentConfig& x, const CorpusSpec& corpus, const fs::path& experiment_log) {
  const Config& templ = x.base_template.config;
  const int64_t lt = templ.data.train_length;
  ensure_store(x, corpus, x.base_template);
  check_stop();
  const auto runs = plan_training_runs(x, corpus);
  if (corpus.base.empty()) ensure_trained(runs.front(), experiment_log);
  check_stop();

  const data::TokenStore store = data::TokenStore::open(store_dir(x, corpus));
  CorpusResults out;
  out.name = corpus.name;
  out.store = store_dir(x, corpus);
  out.train_length = lt;
  out.factors = x.factors;
  out.arch = enum_name(models::kArchs, base_arch(x, corpus));
  const RowResult base_row = new_row("base", "base at L_t", "base", 1, {lt});
  out.base = evaluate_row(base_row, corpus_dir(x, corpus) / "base-eval", base_model_dir(x, corpus), {}, templ, store);

  for (int64_t factor : x.factors) {
    const int64_t le = factor * lt;
    const fs::path fdir = factor_dir(x, corpus, factor);
    const std::string factor_set = "model.extension.factor=" + std::to_string(factor);
    for (auto method : ootb_rows(x, corpus)) {
      check_stop();
      const RowResult row = new_row("ootb-" + std::string(enum_name(models::kExtensionMethods, method)),
                                    ootb_label(x, corpus, method), "ootb", factor, {lt, le});
      std::vector<std::string> overrides;
      if (method != models::ExtensionMethod::none) overrides = {extension_override(method), factor_set};
      out.rows.push_back(evaluate_row(row, fdir / row.key, base_model_dir(x, corpus), overrides, templ, store));
    }
    for (const auto& run : runs) {
      if (run.factor != factor || !run.method) continue;
      check_stop();
      ensure_trained(run, experiment_log);
      check_stop();
      RowResult row = new_row(run.method->name, run.method->domain_adaptation ? "DA" : run.method->name, "trained",
                              factor, {lt, le});
      std::vector<std::string> overrides;
      const auto ootb_extension = default_train_extension(base_arch(x, corpus));
      if (run.method->domain_adaptation && ootb_extension != models::ExtensionMethod::none)
        overrides = {extension_override(ootb_extension), factor_set};
      const fs::path run_dir = run.config.config.run.output_dir;
      row.train_tokens = newest_checkpoint(run_dir)->state.tokens;
      out.rows.push_back(evaluate_row(row, run_dir, (run_dir / "final").string(), overrides, templ, store));
    }
  }
  return out;
}

}  // namespace

void run_experiment(const ExperimentConfig& x) {
  if (const char* world = std::getenv("WORLD_SIZE"); world && std::string(world) != "1")
    throw InputError("WORLD_SIZE=" + std::string(world) +
                     ": `segtrain experiment` runs its grid in one process; launch single runs with segtrain-launch");
  fs::create_directories(x.output_dir);
  const fs::path experiment_log = fs::path(x.output_dir) / "experiment.log";
  log::Options options;
  options.file = experiment_log.string();
  log::init(options);
  install_stop_handlers();
  log::info("experiment ", x.name, ": ", x.corpora.size(), " corpora x ", x.factors.size(), " factors; writing ",
            x.output_dir);
  std::vector<CorpusResults> corpora;
  for (const auto& corpus : x.corpora) {
    corpora.push_back(run_corpus(x, corpus, experiment_log));
    // Tables so far are worth having even if a later corpus fails.
    write_reports(x, corpora);
  }
  log::info("experiment ", x.name, ": wrote ", (fs::path(x.output_dir) / "results.md").string());
}

int cmd_experiment(const ExperimentOptions& options) {
  run_experiment(load_experiment(options.file, options.overrides));
  return 0;
}

}  // namespace segtrain::trainer
