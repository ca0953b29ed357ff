#pragma once
// `segtrain experiment FILE.yaml`: Karypis et al.'s comparison as one command. For each
// corpus: a base model at L_t (given, or pretrained), then for each extension
// factor f (L_e = f * L_t) the out-of-the-box rows (no training, each applicable
// extension method) and the trained rows (DA, full, chunk-a, prefix-a,
// randompos), all under the same budget (compute-equivalent, or train_tokens), each evaluated at
// L_t and L_e on the same held-out windows. Every row lives in its own
// directory and counts as done once its eval.json is there, so an interrupted
// grid resumes where it stopped.
//
// The file is a run config (run, model, data, train, eval, distributed: the
// template every run starts from; its eval.tasks are what every row is scored
// on, each task kept apart so that adding one scores nothing else again) plus an
// `experiment:` section:
//   experiment:
//     name, output_dir, factors: [2, 4], ootb: [...],
//     methods: [da, chunk-0.25, {name: full, set: {...}, budgets: [262144, ...]}, ...],
//     variants: [{name: lora, of: [chunk-0.25@262144], set: {...}}],
//     train_extension: auto | <method>, train_tokens: N,
//     eval_lengths: [...], eval_from_longest: false,
//     corpora: [{name, synthetic: {docs, min_tokens, max_tokens, seed} | inputs: [...] | store: DIR,
//                vocab_size, valid_fraction, base: hf:DIR | checkpoint:DIR}],
//     base:   {set: {key: value, ...}}   # the pretraining run at L_t
//     extend: {set: {key: value, ...}}   # every trained row
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/config.h"
#include "data/synth.h"
#include "models/spec/config.h"
#include "trainer/config/config.h"

namespace segtrain::trainer {

// One way to reach L_e with training. `da` is Karypis et al.'s domain-adaptation
// control: more truncate training at L_t, then the OOTB extension at eval.
// A `key: value` of base.set / extend.set / a method's set, kept as a --set assignment
// plus where it was written.
struct Assignment {
  std::string text;    // "train.lr=1e-3"
  std::string origin;  // "exp.yaml:12:7 (experiment.extend.set)"; a variant's adds ", variant NAME" in the parentheses
};

struct TrainedMethod {
  // "da", "truncate", "full", "chunk-0.25", "chunk-ring-0.25", "prefix-0.5", "randompos", "pose";
  // a point of the budget curve adds "@<tokens>": "chunk-0.25@262144" (its folder and row).
  std::string name;
  std::string sampler = "truncate";  // a registered sampler's name (data/sampler_kind.h)
  double alpha = 0.25;
  data::ChunkPlacement placement = data::ChunkPlacement::uniform;  // chunk-ring-<alpha>: ring
  bool domain_adaptation = false;
  // A point of the budget curve (methods[].budgets): this row's own training tokens;
  // nullopt: the experiment's budget, shared by every row the text compares.
  std::optional<int64_t> budget;
  // methods[].set: settings of this method's runs only (e.g. activation checkpointing
  // for `full`, whose sequences are L_e long), applied after extend.set; a variant's
  // settings follow its row's.
  std::vector<Assignment> set;
  // A row of experiment.variants: the name of the row it trains again with its settings
  // ("chunk-0.25@262144" for "chunk-0.25@262144+lora"); empty: a method's own row.
  std::string variant_of;
  // Its variant's versus: more rows (methods' names, at this row's budget) the report compares it with.
  std::vector<std::string> variant_versus;
};

struct CorpusSpec {
  std::string name;
  std::string origin;  // file:line:col of its entry
  // Exactly one source: a synthetic corpus, text inputs, or a ready store.
  std::optional<data::SynthOptions> synthetic;  // docs, min_tokens, max_tokens (words), seed
  std::vector<std::string> inputs;
  std::string store;
  int64_t vocab_size = 1024;
  double valid_fraction = 0.05;
  // "hf:DIR" | "checkpoint:DIR": a given base; empty: pretrain one at L_t. With text
  // `inputs`, the store is tokenized with the base's own tokenizer (its folder's).
  std::string base;
};

struct ExperimentConfig {
  std::string file;
  std::string name;
  std::string output_dir;
  std::vector<int64_t> factors = {2, 4};
  std::vector<TrainedMethod> methods;
  std::vector<models::ExtensionMethod> ootb;  // empty: every method that applies to the base
  std::optional<models::ExtensionMethod> train_extension;  // nullopt: the scheme's default
  // Tokens every trained row trains on; nullopt: the compute-equivalent budget
  // (L_e / L_t epochs, Karypis et al. 2024, eq. 2). Either way every row sees the same number.
  std::optional<int64_t> train_tokens;
  // Lengths every row of every factor is evaluated at; empty: L_t and L_e.
  std::vector<int64_t> eval_lengths;
  // Each length's perplexity from the first L tokens of the longest windows (one
  // forward a window): exact for a causal model whose positions do not depend on
  // the input's length; rows with dynamic methods are scored length by length.
  bool eval_from_longest = false;
  std::vector<CorpusSpec> corpora;
  std::vector<Assignment> base_set, extend_set;
  // results.json files of earlier runs of this experiment whose rows count as done
  // (the command line's --import-rows; imported_rows.h).
  std::vector<std::string> import_rows;
  LoadedConfig base_template;  // the file's run sections with the command line's --set applied
};

// What an experiment file is loaded for: running its grid needs its corpora and bases
// on disk; writing its report again (--render) reads its names and settings alone.
enum class ExperimentUse { grid, report };

// Parses and checks FILE (every problem at once, each naming file:line:col and
// the key), and for a grid checks its inputs and every run it will make before
// anything runs.
ExperimentConfig load_experiment(const std::string& file, const std::vector<std::string>& overrides,
                                 ExperimentUse use = ExperimentUse::grid);

// Runs (or resumes) the grid and writes results.md, results.json and the plots.
void run_experiment(const ExperimentConfig& experiment);

// Writes results.md, results.json and the plots into `out` (empty: experiment.output_dir) from
// `results` (a results.json of this experiment) with this version's report code: nothing trained
// or evaluated.
void render_experiment(ExperimentConfig experiment, const std::string& results, const std::string& out);

// The trained-row names the grid knows: "da", "truncate", "full", "randompos", "pose",
// "chunk-<alpha>", "chunk-ring-<alpha>", "prefix-<alpha>".
std::optional<TrainedMethod> parse_trained_method(const std::string& name);

// Extension methods that apply to an architecture out of the box, in table order.
std::vector<models::ExtensionMethod> ootb_methods_for(models::Arch arch);

// The extension the trained rows use when train_extension is auto: Karypis et al. 2024
// interpolates the gpt2 table and trains RoPE and ALiBi on plain positions.
models::ExtensionMethod default_train_extension(models::Arch arch);

}  // namespace segtrain::trainer
