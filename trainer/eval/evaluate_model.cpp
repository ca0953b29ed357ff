#include "trainer/eval/evaluate_model.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>

#include "common/dir_lock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/output_path.h"
#include "data/prompt_tokenizer.h"
#include "data/token_store.h"
#include "models/model_io.h"
#include "trainer/config/eval_rules.h"
#include "trainer/eval/eval_outputs.h"
#include "trainer/eval/passkey.h"
#include "trainer/eval/perplexity.h"
#include "trainer/eval/stored_model.h"
#include "trainer/runtime/device.h"
#include "trainer/runtime/memory.h"

namespace segtrain::trainer {

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
  // factor auto: stretch the model to the longest evaluated length.
  const int64_t longest = *std::max_element(options.lengths.begin(), options.lengths.end());
  at::set_num_threads(static_cast<int>(thread_count(options.threads)));
  const c10::Device device = pick_device(*enum_from_name(kDevices, options.device), /*local_rank=*/0, "--device");
  const StoredModel stored = open_stored_model(options.model, options.overrides, longest);
  // Model and store are checked against each other before any weights are read.
  const data::TokenStore store = data::TokenStore::open(options.data);
  check_store_tokenizer(options.data, stored.dir, "--data", "--allow-tokenizer-mismatch",
                        options.allow_tokenizer_mismatch);
  check_store_fits(stored, store.vocab_size(), "--data");
  if (store.split(data::parse_split(options.split)).documents() == 0)
    throw InputError("--data " + options.data + ": its " + options.split + " split holds no documents (prepare it "
                     "with a larger --valid-fraction, or give --split train)");
  models::TransformerLM model = models::load_model(stored.dir, stored.config);
  model->to(device);
  reset_peak_memory(device);

  EvalConfig flags;  // the flags as the config's eval section; its other keys keep their defaults
  flags.lengths = options.lengths;
  flags.max_sequences = options.max_sequences;
  flags.windows_per_document = options.windows_per_document;
  flags.stride = options.stride;
  flags.per_position = !options.per_position_csv.empty();
  for (const auto& problem : window_problems(flags.stride, flags.lengths))
    throw InputError("--stride: " + problem.message);
  const PerplexityOptions eval = perplexity_options(flags, options.loss_chunk_tokens);
  // The store's own tokenizer writes the passkey prompts; a store without one is refused before evaluating.
  std::optional<data::PromptTokenizer> prompts;
  if (options.passkey_trials > 0) {
    try {
      prompts = data::open_prompt_tokenizer(options.data);
      for (int64_t length : options.lengths)  // a length too short for a prompt, too
        make_passkey_prompt(*prompts, *enum_from_name(kPasskeyStyles, options.passkey_style), length, kPasskeySeed, 0);
    } catch (const InputError& e) {
      throw InputError(std::string("--passkey-trials: ") + e.what());
    }
  }
  const Autocast autocast(options.precision == "bf16", device.type());
  const auto started = std::chrono::steady_clock::now();
  const auto results = evaluate(model, store.split(data::parse_split(options.split)), eval);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::vector<PasskeyResult> passkey;
  if (prompts)
    passkey = passkey_accuracy(model, *prompts, *enum_from_name(kPasskeyStyles, options.passkey_style),
                               options.lengths, options.passkey_trials, kPasskeySeed);
  EvalOutputs outputs{options.out, {}, {}, 0};
  if (eval.per_position) {
    outputs.per_position_csv = options.per_position_csv;
    outputs.per_position_svg = fs::path(options.per_position_csv).replace_extension(".svg");
    // The length the model was trained at, when its config records it: the
    // extension's original length, else its position table's (gpt2) rows.
    outputs.train_length = stored.config.extension.original_length.value_or(stored.config.max_positions.value_or(0));
  }
  write_eval_outputs(outputs, options.model, results, passkey, EvalDevice{device, peak_memory(device), seconds});
  log_passkey(passkey);
  log_perplexity("", results);
  log::info("wrote ", options.out, outputs.per_position_csv.empty() ? "" : " and " + outputs.per_position_csv.string());
}

}  // namespace segtrain::trainer
