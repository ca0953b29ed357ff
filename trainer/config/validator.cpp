// Cross-field and file-system checks on a parsed config. Each message starts
// with where the offending key was set (file:line:col, the --set argument, or the
// file for a default) and names the key.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <utility>

#include "common/numbers.h"
#include "data/mixture.h"
#include "data/sampler_kind.h"
#include "data/sampler_rules.h"
#include "models/spec/config_rules.h"
#include "models/spec/converters/lora_config.h"
#include "models/spec/families/hf_config.h"
#include "models/spec/families/peft_config.h"
#include "models/spec/model_config_json.h"
#include "trainer/config/config.h"
#include "trainer/config/eval_rules.h"
#include "trainer/config/model_ref.h"
#include "trainer/config/schema.h"

namespace segtrain::trainer {
namespace {

namespace fs = std::filesystem;
using schema::format_double;

// The most sequences train.global_batch_size takes (2^20: LLaMA's 4M-token batches are 2,048 of 2,048).
constexpr int64_t kMaxGlobalBatch = int64_t{1} << 20;

struct Checker {
  const LoadedConfig& loaded;
  std::vector<std::string> errors;
  bool check_paths = true;

  void fail(const std::string& key, const std::string& message) { errors.push_back(loaded.locate(key) + ": " + message); }
  bool given(const std::string& key) const { return loaded.origins.count(key) > 0; }
};

// `store`, named by `key`, is a token store folder; reported where `origin` was written.
void check_store(Checker& ck, const std::string& origin, const std::string& key, const std::string& store) {
  auto fail = [&](const std::string& message) {
    ck.errors.push_back(ck.loaded.origin(origin) + ": " + key + ": " + message);
  };
  if (store.empty()) fail("required: the token store directory written by `segtrain prepare`");
  else if (!ck.check_paths) return;
  else if (!fs::is_directory(store))
    fail("'" + store + "' does not exist or is not a directory; create it with `segtrain prepare`");
  else if (!fs::exists(fs::path(store) / "meta.json"))
    fail("'" + store + "' is not a token store (no meta.json); create it with `segtrain prepare`");
}

void check_data(Checker& ck, const Config& c) {
  const auto& d = c.data;
  check_store(ck, "data.store", "data.store", d.store);
  for (std::size_t i = 0; i < d.mixture.size(); ++i)
    if (!d.mixture[i].store.empty())
      check_store(ck, "data.mixture", data::source_key(d, i) + ".store", d.mixture[i].store);
  for (const auto& problem : data::sampler_problems(d)) ck.fail(problem.key, problem.message);
  // A mixture's keys have one origin, data.mixture's: each problem is reported there, by its own key.
  for (const auto& problem : data::mixture_problems(d))
    ck.errors.push_back(ck.loaded.origin("data.mixture") + ": " + problem.key + ": " + problem.message);
}

// peft:DIR: an adapter folder PEFT reads, on a base that is here (found through its
// adapter_config.json's base_model_name_or_path).
void check_peft_init(Checker& ck, const ModelRef& ref) {
  const fs::path adapter = ref.adapter;
  if (ref.adapter.empty()) return ck.fail("model.init", "expected a PEFT adapter directory after peft:");
  if (!ck.check_paths) return;
  if (!fs::is_regular_file(adapter / "adapter_config.json"))
    return ck.fail("model.init", "'" + ref.adapter + "' has no adapter_config.json; expected a PEFT LoRA adapter folder");
  if (!fs::is_regular_file(adapter / "adapter_model.safetensors"))
    return ck.fail("model.init", "'" + ref.adapter + "' has no adapter_model.safetensors" +
                                     (fs::exists(adapter / "adapter_model.bin")
                                          ? " (only adapter_model.bin: save it again with PEFT's safe_serialization)"
                                          : ""));
  if (!ref.dir.empty()) return;
  try {  // a file that cannot be read names no base: say why
    models::read_peft_base_model(ref.adapter);
  } catch (const InputError& e) {
    return ck.fail("model.init", e.what());
  }
  ck.fail("model.init", "the base of '" + ref.adapter + "' (adapter_config.json's base_model_name_or_path) is "
                        "neither a folder with config.json nor a model in the Hugging Face cache; set it to the "
                        "base's folder");
}

void check_model(Checker& ck, const Config& c) {
  const auto& m = c.model.spec;
  const std::string& init = c.model.init;
  const auto ref = parse_model_ref(init);
  if (!ref) {
    ck.fail("model.init", "expected scratch, hf:DIR, checkpoint:DIR or peft:DIR, got '" + init + "'");
  } else if (ref->kind == ModelRef::Kind::peft) {
    check_peft_init(ck, *ref);
  } else if (ref->from_folder()) {
    const std::string what = ref->description();
    if (ref->dir.empty()) ck.fail("model.init", "expected " + what + " directory after the colon");
    else if (!ck.check_paths) {
    } else if (!fs::is_directory(ref->dir)) ck.fail("model.init", "'" + ref->dir + "' does not exist or is not a directory");
    else if (!fs::exists(fs::path(ref->dir) / ref->marker_file()))
      ck.fail("model.init", "'" + ref->dir + "' has no " + ref->marker_file() + "; expected " + what + " directory");
  }

  // From a base, the size keys are the base's (checked once it is read).
  const auto sizes = ref && ref->from_folder() ? models::Sizes::from_base : models::Sizes::known;
  for (const auto& problem : models::model_problems(m, sizes)) ck.fail(problem.key, problem.message);

  using models::ExtensionMethod;
  const auto scheme = models::position_scheme(m.arch);
  const auto method = m.extension.method;
  if (method == ExtensionMethod::none && ck.given("model.extension.factor") && m.extension.factor)
    ck.fail("model.extension.factor", "has no effect while model.extension.method is none; set the method too");

  // A learned table has no rows past max_positions: training at L_e positions
  // needs interpolation or a table that is already long enough (every source of a mixture).
  if (scheme != models::PositionScheme::learned || method != ExtensionMethod::none) return;
  std::optional<int64_t> rows = m.max_positions;
  if (!rows && init == "scratch") rows = c.data.train_length;
  if (!rows) return;
  const auto sources = data::data_sources(c.data);
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const data::DataConfig& d = sources[i].data;
    const data::SamplerKind* sampler = data::find_sampler(d.sampler.method);
    const bool segmented = sampler && !sampler->within_train_length;
    if (!segmented || d.extended_length <= d.train_length || *rows >= d.extended_length) continue;
    const std::string which = c.data.mixture.empty() ? "" : " (" + data::source_key(c.data, i) + ")";
    ck.fail("model.extension.method",
            "sampler " + d.sampler.method + which + " uses positions up to L_e - 1 = " +
                std::to_string(d.extended_length - 1) + " but the gpt2 position table has " + std::to_string(*rows) +
                " rows; set model.extension.method: interpolate (Karypis et al. 2024, 3.2)");
  }
}

// A segtrain model folder's sizes (model_config.json, or a run's final/), nullopt when unreadable
// (loading it says why).
std::optional<models::ModelConfig> segtrain_model_sizes(const fs::path& dir) {
  try {
    return models::read_segtrain_model_config(dir.string());
  } catch (const InputError&) {
    return std::nullopt;
  }
}

// The sizes of the model a run builds where they are known before anything loads: the config's
// own from scratch, a base folder's (a peft: adapter's base); nullopt when they are not (a base not
// there yet, or not readable: other checks say why).
std::optional<models::ModelConfig> built_sizes(const Checker& ck, const Config& c) {
  const auto ref = parse_model_ref(c.model.init);
  if (!ref) return std::nullopt;
  if (ref->kind == ModelRef::Kind::scratch) return c.model.spec;
  if (!ck.check_paths || ref->dir.empty()) return std::nullopt;
  try {
    if (ref->kind == ModelRef::Kind::checkpoint) return segtrain_model_sizes(ref->dir);
    return models::read_hf_config(ref->dir);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

std::vector<ConfigProblem> checkpointed_block_problems(const models::ActivationCheckpointing& a, int64_t n_layers) {
  if (a.kind != models::ActivationCheckpointing::Kind::first || a.blocks <= n_layers) return {};
  return {{"model.activation_checkpointing", std::to_string(a.blocks) + " blocks, but the model has " +
                                                 std::to_string(n_layers) + " (true recomputes every block)"}};
}

std::vector<ConfigProblem> base_size_problems(const Config& c, const models::ModelConfig& sizes) {
  auto problems = models::lora_size_problems(c.model.adapters.lora, sizes);
  for (auto& problem : checkpointed_block_problems(c.model.spec.activation_checkpointing, sizes.n_layers))
    problems.push_back(std::move(problem));
  return problems;
}

namespace {

void check_train(Checker& ck, const Config& c) {
  const auto& t = c.train;
  const auto adapters =
      models::lora_problems(c.model.adapters.lora, c.model.spec.arch, c.model.spec.activation_checkpointing.any());
  for (const auto& problem : adapters) ck.fail(problem.key, problem.message);
  // What the base's sizes refuse: adapters the rules above let through (a peft: run's are sized by the
  // adapter's reader), and checkpointed blocks.
  const auto ref = parse_model_ref(c.model.init);
  const bool sizes_adapters =
      c.model.adapters.any() && adapters.empty() && ref && ref->kind != ModelRef::Kind::peft;
  const bool counts_blocks = c.model.spec.activation_checkpointing.kind == models::ActivationCheckpointing::Kind::first;
  if (const auto sizes = sizes_adapters || counts_blocks ? built_sizes(ck, c) : std::nullopt) {
    const auto problems = sizes_adapters ? base_size_problems(c, *sizes)
                                         : checkpointed_block_problems(c.model.spec.activation_checkpointing,
                                                                       sizes->n_layers);
    for (const auto& problem : problems) ck.fail(problem.key, problem.message);
  }
  if (!t.budget.compute_equivalent && !t.budget.tokens)
    ck.fail("train.budget.compute_equivalent", "is false but train.budget.tokens is not set; give one budget");
  if (t.min_lr && *t.min_lr > lr_of(c))
    ck.fail("train.min_lr", format_double(*t.min_lr) + " is above train.lr = " + format_double(lr_of(c)) +
                                " (leave it out: auto is lr / 10)");
  if (t.param_dtype == Precision::bf16 && t.precision != Precision::bf16)
    ck.fail("train.param_dtype", "bf16 parameters need train.precision: bf16 (the forward under bf16 autocast, "
                                 "positions and normalizations in fp32)");
  if (t.param_dtype == Precision::bf16 && c.eval.precision == EvalPrecision::fp32)
    ck.fail("eval.precision", "fp32 evaluation needs fp32 weights but train.param_dtype: bf16 holds them in bf16; "
                              "evaluate under bf16 (train) here, or the run's fp32 master weights afterwards with "
                              "`segtrain eval --model RUN/final --precision fp32`");
  if (!t.micro_batch_size && !t.global_batch_size)
    ck.fail("train.micro_batch_size", "auto needs train.global_batch_size (the sequences of a step: auto chooses "
                                      "how many go through at once, train.grad_accum the rest)");
  if (t.global_batch_size && *t.global_batch_size > kMaxGlobalBatch)
    ck.fail("train.global_batch_size", std::to_string(*t.global_batch_size) + " sequences a step is past " +
                                       std::to_string(kMaxGlobalBatch) + "; a step of that many is not a batch");
  if (t.global_batch_size && t.grad_accum != 1)
    ck.fail("train.grad_accum", "follows from train.global_batch_size (" + std::to_string(*t.global_batch_size) +
                                " sequences a step over micro_batch_size x ranks); leave it out, or drop "
                                "train.global_batch_size");
  if (t.global_batch_size && t.micro_batch_size && *t.global_batch_size % *t.micro_batch_size != 0)
    ck.fail("train.global_batch_size", std::to_string(*t.global_batch_size) + " is not a multiple of "
                                       "train.micro_batch_size " + std::to_string(*t.micro_batch_size));
  if (t.batch_memory_gib && t.micro_batch_size &&
      c.model.spec.activation_checkpointing.kind != models::ActivationCheckpointing::Kind::automatic)
    ck.fail("train.batch_memory_gib", "applies to train.micro_batch_size: auto and model.activation_checkpointing: "
                                      "auto, neither of which this config sets");
  if (t.reduce_dtype == Precision::bf16 && t.param_dtype != Precision::bf16)
    ck.fail("train.reduce_dtype", "bf16 applies to bf16 parameters; set train.param_dtype: bf16 (auto decides by "
                                  "the device, and fp32 parameters are reduced in fp32)");
}

void check_run_and_eval(Checker& ck, const Config& c) {
  if (c.run.output_dir.empty()) ck.fail("run.output_dir", "must not be empty");
  if (c.run.name.empty()) ck.fail("run.name", "must not be empty");
  if (c.eval.split != "train" && c.eval.split != "valid")
    ck.fail("eval.split", "expected train or valid, got '" + c.eval.split + "'");
  for (const auto& problem : window_problems(c.eval.stride, c.eval.lengths)) ck.fail(problem.key, problem.message);
  // A task's options without the task would be read and never used.
  for (const auto& [key, where] : ck.loaded.origins)
    if (const std::string task = unlisted_task_of_key(key, c.eval.tasks); !task.empty())
      ck.fail(key, task + " is not in eval.tasks; list it there (eval.tasks: [perplexity, " + task +
                       "]) or drop this key");
  for (const auto& task : c.eval.periodic_tasks)
    if (std::find(c.eval.tasks.begin(), c.eval.tasks.end(), task) == c.eval.tasks.end())
      ck.fail("eval.periodic_tasks", task + " is not in eval.tasks; periodic evaluation runs some of the tasks "
                                     "eval.tasks lists (its options are theirs)");
}

}  // namespace

std::vector<std::string> validate_config(const LoadedConfig& loaded, bool check_paths, ConfigUse use) {
  Checker ck{loaded, {}, check_paths};
  check_data(ck, loaded.config);
  if (use == ConfigUse::sample) return ck.errors;
  check_model(ck, loaded.config);
  check_train(ck, loaded.config);
  check_run_and_eval(ck, loaded.config);
  return ck.errors;
}

}  // namespace segtrain::trainer
