#include <filesystem>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/log.h"
#include "data/token_store.h"
#include "data/tokenizer.h"
#include "models/model_io.h"
#include "models/positions.h"
#include "trainer/commands.h"
#include "trainer/evaluate.h"
#include "trainer/model_overrides.h"
#include "trainer/passkey.h"

namespace segtrain::trainer {

int cmd_eval(const EvalOptions& options) {
  namespace fs = std::filesystem;
  std::string model_dir;
  if (!models::detect_model_format(options.model, &model_dir))
    throw InputError("--model: '" + options.model +
                     "' is neither a segtrain checkpoint/run (model_config.json) nor an HF folder (config.json)");
  // factor auto: stretch the model to the longest evaluated length.
  const int64_t longest = *std::max_element(options.lengths.begin(), options.lengths.end());
  const models::ModelConfig config =
      apply_model_overrides(models::read_model_config(model_dir), options.overrides, longest);
  models::TransformerLM model = models::load_model(model_dir, config);

  const data::TokenStore store = data::TokenStore::open(options.data);
  if (store.vocab_size() > models::vocab_size_of(config))
    throw InputError("--data: the store's vocabulary (" + std::to_string(store.vocab_size()) +
                     ") is larger than the model's (" + std::to_string(models::vocab_size_of(config)) + ")");
  PerplexityOptions eval;
  eval.lengths = options.lengths;
  eval.max_sequences = options.max_sequences;
  eval.stride = options.stride;
  eval.per_position = !options.per_position_csv.empty();
  for (int64_t length : eval.lengths)
    if (eval.stride >= length)
      throw InputError("--stride " + std::to_string(eval.stride) + " must be shorter than the length " +
                       std::to_string(length) + " (0 gives non-overlapping windows)");
  const auto results = evaluate(model, store.split(data::parse_split(options.split)), eval);
  std::vector<PasskeyResult> passkey;
  if (options.passkey_trials > 0) {
    const fs::path tokenizer_model = fs::path(options.data) / "tokenizer.model";
    if (!fs::exists(tokenizer_model))
      throw InputError("--passkey-trials: the store '" + options.data +
                       "' has no sentencepiece tokenizer.model to write prompts with");
    const auto tokenizer = data::Tokenizer::load(tokenizer_model.string());
    passkey = passkey_accuracy(model, tokenizer, *enum_from_name(kPasskeyStyles, options.passkey_style), options.lengths,
                               options.passkey_trials, /*seed=*/1234);
  }
  write_file_atomic(options.out, eval_json(options.model, results, passkey));
  if (eval.per_position) {
    write_file_atomic(options.per_position_csv, per_position_csv(results));
    fs::path svg = fs::path(options.per_position_csv).replace_extension(".svg");
    write_file_atomic(svg, per_position_svg(results, options.model));
  }
  for (const auto& p : passkey) log::info("passkey L=", p.length, ": ", p.correct, "/", p.trials, " correct");
  for (const auto& r : results)
    log::info("L=", r.length, ": ppl ", r.ppl, " (loss ", r.loss, ") over ", r.tokens, " tokens in ", r.sequences,
              " sequences");
  return 0;
}

}  // namespace segtrain::trainer
