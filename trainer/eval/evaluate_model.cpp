#include "trainer/eval/evaluate_model.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

#include "common/dir_lock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/output_path.h"
#include "data/prompt_tokenizer.h"
#include "data/token_store.h"
#include "models/modules/model_io.h"
#include "trainer/config/eval_rules.h"
#include "trainer/eval/eval_outputs.h"
#include "trainer/eval/perplexity.h"
#include "trainer/eval/stored_model.h"
#include "trainer/eval/suite.h"
#include "trainer/runtime/device.h"
#include "trainer/runtime/memory.h"

namespace segtrain::trainer {

namespace {

// --tasks and every --set eval.<task>.* as a run config's eval section would hold them.
EvalConfig suite_config(const EvalOptions& options) {
  LoadedConfig loaded;
  loaded.source = "segtrain eval";
  loaded.config.eval.tasks = options.tasks;
  for (const auto& assignment : options.task_settings) {
    // The eval section's own keys are flags here (--lengths, --max-sequences, --tasks, ...).
    if (task_of_key(assignment.substr(0, assignment.find('='))).empty())
      throw InputError("--set " + assignment + ": segtrain eval takes a task's options (eval.<task>.*) with --set; "
                       "the eval section's own keys are its flags (--tasks, --lengths, --max-sequences, --stride, "
                       "--split, --precision)");
    apply_override(loaded, assignment);
  }
  for (const auto& [key, where] : loaded.origins)
    if (const std::string task = unlisted_task_of_key(key, options.tasks); !task.empty()) {
      std::string tasks;
      for (const auto& t : options.tasks) tasks += t + ",";
      throw InputError(where + ": " + task + " is not among --tasks; add it (--tasks " + tasks + task + ")");
    }
  return loaded.config.eval;
}

}  // namespace

void evaluate_stored_model(const EvalOptions& options) {
  namespace fs = std::filesystem;
  // Where the results go is checked before minutes of evaluation are spent.
  check_output_file(options.out, "--out");
  if (!options.per_position_csv.empty()) check_output_file(options.per_position_csv, "--per-position");
  // Nothing is written into a run directory that a run is writing.
  const DirectoryLock out_lock = DirectoryLock::hold_enclosing(options.out, "--out", "segtrain eval");
  const DirectoryLock csv_lock = options.per_position_csv.empty()
                                     ? DirectoryLock()
                                     : DirectoryLock::hold_enclosing(options.per_position_csv, "--per-position",
                                                                     "segtrain eval");
  at::set_num_threads(static_cast<int>(thread_count(options.threads)));
  const c10::Device device = pick_device(*enum_from_name(kDevices, options.device), /*local_rank=*/0, "--device");
  EvalConfig flags = suite_config(options);  // the flags as the config's eval section; its other keys keep their defaults
  flags.lengths = options.lengths;
  flags.max_sequences = options.max_sequences;
  flags.windows_per_document = options.windows_per_document;
  flags.stride = options.stride;
  flags.per_position = !options.per_position_csv.empty();
  for (const auto& problem : window_problems(flags.stride, flags.lengths))
    throw InputError("--stride: " + problem.message);
  const EvalSuite suite(flags, flags.lengths, perplexity_options(flags, options.loss_chunk_tokens), options.split,
                        kEvalPromptSeed);
  // factor auto: stretch the model to the longest sequence a task gives it.
  const int64_t longest = suite.longest();
  const StoredModel stored = open_stored_model(options.model, options.overrides, longest, AdapterUse::on_its_base);
  // Nothing it reads is written over: the model's folder and its base (a PEFT adapter's too), the store.
  std::vector<CommandInput> reads = stored.inputs;
  reads.push_back({options.data, "--data"});
  check_output_is_no_input(options.out, "--out", reads);
  const fs::path per_position_svg = fs::path(options.per_position_csv).replace_extension(".svg");
  if (!options.per_position_csv.empty()) {
    check_output_is_no_input(options.per_position_csv, "--per-position", reads);
    check_output_is_no_input(per_position_svg, "--per-position (its plot)", reads);
  }
  // Model and store are checked against each other before any weights are read.
  const data::TokenStore store = data::TokenStore::open(options.data);
  check_store_tokenizer(options.data, stored.dir, "--data", "--allow-tokenizer-mismatch",
                        options.allow_tokenizer_mismatch);
  check_store_fits(stored, store.vocab_size(), "--data");
  if (store.split(data::parse_split(options.split)).documents() == 0)
    throw InputError("--data " + options.data + ": its " + options.split + " split holds no documents (prepare it "
                     "with a larger --valid-fraction, or give --split train)");
  // The store's own tokenizer writes the prompts; a store without one is refused before evaluating.
  const auto prompts = suite.open_prompts(options.data, store.split(data::parse_split(options.split)), "--tasks");
  const TaskData data{&store.split(data::parse_split(options.split)), prompts ? &*prompts : nullptr};
  models::TransformerLM model = load_stored_model(stored);
  model->to(device);
  reset_peak_memory(device);

  const Autocast autocast(options.precision == "bf16", device.type());
  EvalOutputs outputs{options.out, {}, {}, 0};
  if (flags.per_position) {
    outputs.per_position_csv = options.per_position_csv;
    outputs.per_position_svg = per_position_svg;
    // The length the model was trained at, when its config records it: the
    // extension's original length, else its position table's (gpt2) rows.
    outputs.train_length = stored.config.extension.original_length.value_or(stored.config.max_positions.value_or(0));
  }
  // Each task's figures are written as they come: a later task that fails keeps them.
  SuiteRun how;
  how.on_result = [&](const EvalTask&, const std::vector<TaskResult>& results) {
    write_eval_outputs(outputs, options.model, results, EvalDevice{device, peak_memory(device)});
  };
  const std::vector<TaskResult> results = run_suite(suite, model, data, how);
  const bool curve = perplexity_result(results) && !outputs.per_position_csv.empty();
  log::info("wrote ", options.out, curve ? " and " + outputs.per_position_csv.string() : std::string());
}

}  // namespace segtrain::trainer
