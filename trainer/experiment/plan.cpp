// Where an experiment keeps each corpus, store, run and row, the run configs it
// derives from the template, and the rows it reports (experiment/plan.h).
#include "trainer/experiment/plan.h"

#include <algorithm>
#include <iomanip>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "common/error.h"
#include "models/modules/model_io.h"
#include "models/modules/positions.h"
#include "models/spec/auto_values.h"
#include "trainer/config/model_ref.h"
#include "trainer/config/setting.h"

namespace segtrain::trainer {

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
  return model_ref_dir(base_init(x, corpus));
}

models::Arch base_arch(const ExperimentConfig& x, const CorpusSpec& corpus) {
  return corpus.base.empty() ? x.base_template.config.model.spec.arch
                             : models::read_model_config(model_ref_dir(corpus.base)).arch;
}

std::vector<models::ExtensionMethod> ootb_rows(const ExperimentConfig& x, const CorpusSpec& corpus) {
  return x.ootb.empty() ? ootb_methods_for(base_arch(x, corpus)) : x.ootb;
}

models::ExtensionMethod train_extension(const ExperimentConfig& x, const CorpusSpec& corpus) {
  return x.train_extension.value_or(default_train_extension(base_arch(x, corpus)));
}

int64_t base_context(const ExperimentConfig& x, const CorpusSpec& corpus) {
  if (corpus.base.empty()) return x.base_template.config.data.train_length;
  return models::original_length_of(models::read_model_config(model_ref_dir(corpus.base)));
}

double extension_factor(const ExperimentConfig& x, const CorpusSpec& corpus, int64_t factor) {
  return models::auto_extension_factor(factor * x.base_template.config.data.train_length, base_context(x, corpus));
}

std::vector<int64_t> row_lengths(const ExperimentConfig& x, int64_t factor) {
  if (!x.eval_lengths.empty()) return x.eval_lengths;
  const int64_t lt = x.base_template.config.data.train_length;
  return {lt, factor * lt};
}

namespace {

// Sets a key the grid owns, recording where it came from for error messages.
template <class T>
void grid_set(LoadedConfig& run, const std::string& key, T& field, const T& value, const std::string& label) {
  if (!is_grid_key(key)) throw std::logic_error("experiment plan sets " + key + ", which is not a grid key");
  field = value;
  run.origins[key] = run.source + " (experiment grid, run " + label + ")";
}

// Each error names where the setting was written (file:line:col, the `set:` key holding it, a
// variant's name), as the key's origin does for the checks of the run after.
void apply_assignments(LoadedConfig& run, const std::vector<Assignment>& assignments) {
  for (const auto& a : assignments) apply_setting(run, a.text, a.origin);
}

// Every trained row against the sizes of the base it starts from (a given base's, or those the grid's
// base run is built with), when the experiment is planned: adapters too large for the base, or more
// checkpointed blocks than it has, are refused before any row trains, not when the row's turn comes.
void check_against_the_base(const CorpusSpec& corpus, const std::vector<PlannedRun>& runs) {
  std::optional<models::ModelConfig> sizes;
  for (const auto& run : runs) {
    const Config& c = run.config.config;
    if (!run.method || (!c.model.adapters.any() &&
                        c.model.spec.activation_checkpointing.kind != models::ActivationCheckpointing::Kind::first))
      continue;
    if (!sizes)
      sizes = corpus.base.empty() ? runs.front().config.config.model.spec
                                  : models::read_model_config(model_ref_dir(corpus.base));
    for (const auto& problem : base_size_problems(c, *sizes))
      throw InputError(run.config.locate(problem.key) + ": " + problem.message + " (row " + corpus.name + "/" +
                       run.label + ")");
  }
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
  // Karypis et al. 2024's OOTB row of a learned (APE) table is the interpolated table.
  if (learned && method == models::ExtensionMethod::interpolate) return "OOTB";
  return std::string("OOTB ") + enum_name(models::kExtensionMethods, method);
}

}  // namespace

bool is_grid_key(const std::string& key) { return key_has(key, KeyRole::grid); }

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
    grid_set(r, "data.sampler.method", c.data.sampler.method, std::string("truncate"), "base");
    grid_set(r, "data.sampler.placement", c.data.sampler.placement, data::ChunkPlacement::uniform, "base");
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
      for (const auto& key : keys_with(KeyRole::model_shape)) r.origins.erase(key);
      apply_assignments(r, x.extend_set);
      apply_assignments(r, method.set);
      grid_set(r, "run.output_dir", c.run.output_dir, (factor_dir(x, corpus, factor) / method.name).string(), label);
      grid_set(r, "run.name", c.run.name, x.name + "/" + corpus.name + "/" + label, label);
      grid_set(r, "model.init", c.model.init, base_init(x, corpus), label);
      grid_set(r, "data.store", c.data.store, store, label);
      grid_set(r, "data.extended_length", c.data.extended_length, factor * lt, label);
      grid_set(r, "data.sampler.method", c.data.sampler.method,
               method.domain_adaptation ? std::string("truncate") : method.sampler, label);
      grid_set(r, "data.sampler.alpha", c.data.sampler.alpha, method.alpha, label);
      grid_set(r, "data.sampler.placement", c.data.sampler.placement,
               method.domain_adaptation ? data::ChunkPlacement::uniform : method.placement, label);
      // DA trains at L_t on the positions the base knows; it is extended only
      // when evaluated, like the OOTB rows.
      const auto extension = method.domain_adaptation ? models::ExtensionMethod::none : train_extension(x, corpus);
      grid_set(r, "model.extension.method", c.model.spec.extension.method, extension, label);
      std::optional<double> factor_value;
      if (extension != models::ExtensionMethod::none) factor_value = extension_factor(x, corpus, factor);
      grid_set(r, "model.extension.factor", c.model.spec.extension.factor, factor_value, label);
      // Every trained row sees the same number of tokens: L_e / L_t epochs (Karypis et al. 2024,
      // eq. 2) or the experiment's train_tokens (a corpus far larger than a budget);
      // a point of a method's budget curve, its own.
      const std::optional<int64_t> tokens = method.budget ? method.budget : x.train_tokens;
      grid_set(r, "train.budget.compute_equivalent", c.train.budget.compute_equivalent, !tokens, label);
      c.train.budget.tokens = tokens;
      if (method.budget) r.origins["train.budget.tokens"] = x.file + " (experiment.methods: " + method.name + ")";
      else if (x.train_tokens) r.origins["train.budget.tokens"] = x.file + " (experiment.train_tokens)";
      grid_set(r, "eval.lengths", c.eval.lengths, std::vector<int64_t>{lt}, label);
      runs.push_back(std::move(run));
    }
  check_against_the_base(corpus, runs);
  return runs;
}

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
      p.row.variant_versus = m.variant_versus;
      const auto ootb_extension = default_train_extension(base_arch(x, corpus));
      if (m.domain_adaptation && ootb_extension != models::ExtensionMethod::none)
        p.overrides = {extension_override(ootb_extension), factor_set};
      rows.push_back(std::move(p));
    }
  }
  return rows;
}

std::string format_factor(double factor) {
  std::ostringstream out;
  out << std::setprecision(12) << factor;
  return out.str();
}

}  // namespace segtrain::trainer
