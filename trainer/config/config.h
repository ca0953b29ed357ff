#pragma once
// A run's configuration: plain structs, one per YAML section (docs/architecture.md,
// "Config keys"). Parsing (parser.cpp) and cross-field validation (validator.cpp)
// are separate steps, as in marian-nmt; the list of keys, their types, ranges,
// defaults, docs and roles lives in one place, schema.cpp. No torch here: this
// library builds and tests without LibTorch.
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/enum_names.h"
#include "common/log.h"
#include "data/config.h"
#include "models/spec/config.h"
#include "models/spec/converters/lora_config.h"
#include "trainer/config/eval_tasks.h"

namespace segtrain::trainer {

inline constexpr EnumName<log::Level> kLogLevels[] = {
    {"trace", log::Level::trace}, {"debug", log::Level::debug}, {"info", log::Level::info},
    {"warn", log::Level::warn},   {"error", log::Level::error}, {"off", log::Level::off}};

enum class Device { auto_select, cpu, cuda };
inline constexpr EnumName<Device> kDevices[] = {
    {"auto", Device::auto_select}, {"cpu", Device::cpu}, {"cuda", Device::cuda}};

enum class Schedule { cosine, linear, constant };
inline constexpr EnumName<Schedule> kSchedules[] = {
    {"cosine", Schedule::cosine}, {"linear", Schedule::linear}, {"constant", Schedule::constant}};

enum class Precision { fp32, bf16 };
inline constexpr EnumName<Precision> kPrecisions[] = {{"fp32", Precision::fp32},
                                                      {"bf16", Precision::bf16}};

// eval.precision: train follows train.precision (a bf16 run evaluates under
// the autocast it trained with), fp32 and bf16 say so.
enum class EvalPrecision { train, fp32, bf16 };
inline constexpr EnumName<EvalPrecision> kEvalPrecisions[] = {
    {"train", EvalPrecision::train}, {"fp32", EvalPrecision::fp32}, {"bf16", EvalPrecision::bf16}};

enum class Backend { auto_select, gloo, nccl };
inline constexpr EnumName<Backend> kBackends[] = {
    {"auto", Backend::auto_select}, {"gloo", Backend::gloo}, {"nccl", Backend::nccl}};

struct RunConfig {
  std::string name = "segtrain";
  std::string output_dir = "runs/segtrain";
  int64_t seed = 1234;
  Device device = Device::auto_select;
  int64_t threads = 0;  // 0: all cores of this process's share
  log::Level log_level = log::Level::info;
  bool log_all_ranks = false;  // every rank logs to output_dir/logs/rank-<r>.log
};

// Adapters a run adds to its model (model.adapters.*): each one a model converter.
struct Adapters {
  models::LoraConfig lora;  // rank 0: none; its trainable is train.trainable
  bool any() const { return lora.rank > 0; }  // a frozen base, only adapters (and what they name) train
};

struct ModelSection {
  std::string init = "scratch";  // scratch | hf:DIR | checkpoint:DIR
  models::ModelConfig spec;
  Adapters adapters;
};

struct Budget {
  std::optional<int64_t> tokens;   // training tokens (input positions) to process
  bool compute_equivalent = true;  // Karypis et al. 2024, eq. 2: L_e/L_t epochs, 1 for full
};

struct TrainConfig {
  Budget budget;
  std::optional<int64_t> micro_batch_size = 8;  // nullopt ("auto"): the largest that fits (trainer/train/batch_size.h)
  int64_t grad_accum = 1;
  // Sequences per optimizer step over all ranks; nullopt: micro_batch_size x grad_accum x ranks.
  // Set, grad_accum follows from it, so the step is the same on any number of ranks or any device.
  std::optional<int64_t> global_batch_size;
  // The memory micro_batch_size auto may fill, GiB; nullopt: 90% of the device's (batch_size.h).
  std::optional<double> batch_memory_gib;
  std::optional<double> lr;            // nullopt ("auto"): lr_of
  std::optional<double> min_lr;        // nullopt ("auto"): lr / 10 (min_lr_of)
  std::optional<int64_t> warmup_steps;  // nullopt ("auto"): warmup_steps_of
  Schedule schedule = Schedule::cosine;
  double weight_decay = 0.1;
  std::vector<std::string> no_decay = {"bias", "norm", "ln_"};
  // Globs over parameter names that do not train ("!glob" trains again, the last match
  // decides: models/modules/converters/freeze.h); empty: every parameter trains.
  std::vector<std::string> freeze;
  std::vector<double> betas = {0.9, 0.95};
  double eps = 1e-8;
  double grad_clip = 1.0;  // 0: no clipping
  Precision precision = Precision::fp32;
  // Storage of parameters and gradients on every rank (nullopt: auto, param_dtype_of).
  // bf16 keeps an fp32 master copy of the parameters in the optimizer state (sharded
  // with the moments under distributed.shard_optimizer) and accumulates the reduced
  // gradient in fp32 there; needs precision bf16.
  std::optional<Precision> param_dtype;
  Precision reduce_dtype = Precision::fp32;  // the gradient collectives' dtype with bf16 parameters
  int64_t checkpoint_every = 500;  // steps; 0: only the final checkpoint
  int64_t keep_last = 2;           // step checkpoints kept; 0: keep all
  bool final_optimizer_state = false;  // final/ keeps AdamW's state (2x the model in fp32) only when asked
  // Step checkpoints are copied to host memory and written while training goes
  // on (trainer/train/checkpoint_writer.h); false: the step waits for the write.
  bool save_in_background = true;
  int64_t eval_every = 0;          // steps; 0: evaluate only at the end
  int64_t log_every = 10;
  int64_t max_bad_steps = 10;      // consecutive non-finite losses before aborting
  // Tokens per slice of the LM head + cross-entropy (training and evaluation),
  // so the full [tokens x vocab] logits never exist at once. nullopt: auto (models/modules/lm_head_loss.h:
  // about 64 MiB of fp32 logits, d_model tokens while the head trains); 0: the whole logits.
  std::optional<int64_t> loss_chunk_tokens;
  bool tensorboard = true;
};


struct EvalConfig {
  // Empty: auto, resolved by load_config to eval_lengths_for(data) (L_t, 2 L_t, 4 L_t, ... and L_e).
  std::vector<int64_t> lengths;
  std::string split = "valid";
  bool per_position = false;
  std::optional<int64_t> max_sequences;  // per length; 0: all; nullopt ("auto"): eval_windows_of
  int64_t windows_per_document = 0;  // 0: every window a document holds
  int64_t stride = 0;          // 0: non-overlapping windows (Karypis et al. 2024); else sliding
  int64_t batch_size = 4;
  // What the final evaluation runs, in the catalog's order (trainer/config/eval_tasks.h):
  // perplexity reads the keys above, every other task its own options.
  std::vector<std::string> tasks = {"perplexity"};
  // What the evaluations during training (train.eval_every) run, a subset of tasks; empty: auto, all of them.
  std::vector<std::string> periodic_tasks;
  std::map<std::string, TaskOptions> task = default_task_options();  // eval.<task>.*
  EvalPrecision precision = EvalPrecision::train;
};

// Whether evaluation (every task) runs under bf16 autocast.
inline bool evaluates_in_bf16(const EvalConfig& eval, Precision training) {
  return eval.precision == EvalPrecision::bf16 ||
         (eval.precision == EvalPrecision::train && training == Precision::bf16);
}

struct DistributedConfig {
  Backend backend = Backend::auto_select;
  int64_t timeout_s = 300;
  int64_t save_timeout_s = 1800;  // how long ranks wait for each other's checkpoint writes
  double bucket_mb = 4;  // gradient all-reduce bucket size: small enough that buckets overlap backward on small models
  bool shard_optimizer = false;  // ZeRO-1: each rank keeps AdamW's moments for its 1/N slice of every bucket
};

struct Config {
  RunConfig run;
  ModelSection model;
  data::DataConfig data;
  TrainConfig train;
  EvalConfig eval;
  DistributedConfig distributed;
};

// train.lr and train.warmup_steps when auto. From scratch 3e-4 after 100 steps. From a pretrained
// base (model.init hf: or checkpoint:) 2e-5 after 20 steps: the continued-pretraining recipe with
// which Position Interpolation, YaRN and LongLoRA extend Llama's context (lr 2e-5, 20 warm-up
// steps); 3e-4 undoes what the base learnt (docs/training.md, "Optimizer", measures it). An auto
// warm-up takes at most a quarter of the run's steps. LoRA adapters on a base (model.adapters.lora.rank
// > 0, peft: included) 2e-4, QLoRA's rate and the study's adapter rows': their B starts at zero, and
// at full fine-tuning's 2e-5 they barely leave the base (bench/lora_lr_bench.sh, docs/training.md).
inline constexpr double kScratchLr = 3e-4;
inline constexpr double kPretrainedLr = 2e-5;
inline constexpr double kAdapterLr = 2e-4;
inline constexpr int64_t kScratchWarmupSteps = 100;
inline constexpr int64_t kPretrainedWarmupSteps = 20;
inline bool from_pretrained(const Config& c) { return c.model.init != "scratch"; }
inline double lr_of(const Config& c) {
  if (c.train.lr) return *c.train.lr;
  if (!from_pretrained(c)) return kScratchLr;
  return c.model.adapters.any() ? kAdapterLr : kPretrainedLr;
}
// train.param_dtype when auto: bf16 where a bf16 run trains on a CUDA device (its matmuls
// take bf16 weights anyway: bf16 storage spares autocast's cast of every weight in every
// forward and keeps the residual stream in bf16, as Megatron and llm.c train), unless
// eval.precision: fp32 asks for fp32 weights; else fp32 (a CPU has no fast bf16 GEMM,
// trainer/runtime/cpu_matmul.h). The master weights stay fp32 either way.
inline Precision param_dtype_of(const Config& c, bool cuda_device) {
  if (c.train.param_dtype) return *c.train.param_dtype;
  const bool bf16_run = c.train.precision == Precision::bf16 && c.eval.precision != EvalPrecision::fp32;
  return cuda_device && bf16_run ? Precision::bf16 : Precision::fp32;
}
// The schedule's final learning rate: min_lr, or lr / 10 when it is auto (so a
// lower lr, as when extending a pretrained model, never falls below its floor).
inline double min_lr_of(const Config& c) { return c.train.min_lr.value_or(lr_of(c) / 10.0); }
inline int64_t warmup_steps_of(const Config& c, int64_t total_steps) {
  if (c.train.warmup_steps) return *c.train.warmup_steps;
  return std::min(from_pretrained(c) ? kPretrainedWarmupSteps : kScratchWarmupSteps, total_steps / 4);
}

// eval.max_sequences when auto: 64 windows a length; for a run from a pretrained base, as many as
// keep its final evaluation within a quarter of the run's training tokens (forward only: about a
// twelfth of the training's compute), at least 4 so that a perplexity still averages several
// windows: a short extension to 16k would otherwise spend longer evaluating than training.
inline constexpr int64_t kEvalWindows = 64;
inline constexpr int64_t kFewestAutoEvalWindows = 4;
inline int64_t eval_windows_of(const Config& c, int64_t train_tokens) {
  if (c.eval.max_sequences) return *c.eval.max_sequences;
  if (!from_pretrained(c)) return kEvalWindows;
  int64_t per_window = 0;
  for (const int64_t length : c.eval.lengths) per_window += length;
  return std::clamp(train_tokens / std::max<int64_t>(4 * per_window, 1), kFewestAutoEvalWindows, kEvalWindows);
}

// Where each key's value came from ("file.yaml:12:5", "--set train.lr=1e-4", or
// absent for defaults), so validation errors can point at it.
using Origins = std::map<std::string, std::string>;

struct LoadedConfig {
  Config config;
  Origins origins;
  std::string source;  // the file name

  // "<where key was set>: key", where is file:line:col, the --set argument, or
  // "<file> (default)": how every message about a config value begins.
  std::string locate(const std::string& key) const { return origin(key) + ": " + key; }
  // Where `key` was written (file:line:col, the --set argument), or the file for a default.
  std::string origin(const std::string& key) const {
    auto it = origins.find(key);
    return it != origins.end() ? it->second : source + " (default)";
  }
};

// What a command uses a config for: `segtrain sample` only samples, so only the
// data section must be valid; training needs all of it.
enum class ConfigUse { train, sample };

// Reads FILE, applies `--set key=value` overrides in order, resolves eval.lengths
// auto, and validates what `use` needs. Throws InputError listing every problem
// found, each naming file:line:col or the --set argument, the key, and what was
// expected.
LoadedConfig load_config(const std::string& file, const std::vector<std::string>& overrides,
                         ConfigUse use = ConfigUse::train);

// eval.lengths auto: L_t, 2 L_t, 4 L_t, ... below L_e, then L_e. Doubling rather
// than every multiple keeps the evaluation's cost in proportion to the run's for
// large factors (L_e = 32 L_t gives 6 lengths, not 32).
std::vector<int64_t> eval_lengths_for(const data::DataConfig& data);

// Parsing only (no cross-field checks); used by load_config and by tests.
LoadedConfig parse_config_file(const std::string& file);
// Top-level keys in `other_sections` (the `experiment:` of an experiment file)
// are left to their own reader.
LoadedConfig parse_config_text(const std::string& text, const std::string& source_name,
                               const std::vector<std::string>& other_sections = {});
void apply_override(LoadedConfig& loaded, const std::string& assignment);

// Cross-field and file-system checks; returns one message per problem. Without
// `check_paths`, data.store and model.init directories need not exist yet (an
// experiment checks runs whose inputs earlier runs will write).
std::vector<std::string> validate_config(const LoadedConfig& loaded, bool check_paths = true,
                                         ConfigUse use = ConfigUse::train);
// What only the base's shape `sizes` refuses, before anything allocates (validator.cpp): adapters
// larger than the projections they adapt, more checkpointed blocks than the base has. An experiment's
// plan asks it of each row's base; the validator asks its two rules of a run's own.
std::vector<ConfigProblem> base_size_problems(const Config& c, const models::ModelConfig& sizes);
// Its rule for model.activation_checkpointing alone (the resolved model's last guard).
std::vector<ConfigProblem> checkpointed_block_problems(const models::ActivationCheckpointing& a, int64_t n_layers);

// The resolved config as YAML: every key, in schema order. Parsing it gives back
// an equal Config.
std::string to_yaml(const Config& config);

// Markdown table of every key with type, default and meaning (docs/configuration.md).
std::string reference_markdown();

// The rules that depend on which key is which, declared once on the schema
// field (config/schema.cpp) instead of as lists beside each rule.
enum class KeyRole {
  model_shape,   // describes the weights' shapes: a run from a stored base may only repeat it
  resume,        // changing it would make a resumed run compute something else
  stored_model,  // may be `--set` on a stored model (eval, export, inspect): nothing the weights depend on
  optimizer,     // optimizer settings: an experiment refuses to reuse a run trained with others
  grid,          // the experiment grid sets it for each run: an experiment file's sets may not give it
};
std::vector<std::string> keys_with(KeyRole role);
bool key_has(const std::string& key, KeyRole role);

// The YAML text of one key's value in `config` ("0.0003", "auto", "[256, 512]").
std::string key_text(const Config& config, const std::string& key);

}  // namespace segtrain::trainer
