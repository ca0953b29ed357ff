#pragma once
// Passkey retrieval (Mohtashami & Jaggi 2023): a key is hidden at a random depth
// of filler text, the prompt ends by asking for it, and the model must produce it
// by greedy decoding. Accuracy by prompt length shows whether the model really
// uses distant context.
//   digits : "The pass key is 71432. Remember it. ..." in repeated filler (the usual form)
//   recall : the synthetic corpus's own form, "the password of X is Y ." ...
//            "recall : the password of X is", for models trained on `segtrain synth`
// Prompts are written with the store's own tokenizer (data/prompt_tokenizer.h:
// sentencepiece or a byte-level BPE), start with BOS when the store's documents do,
// and the whole text (prompt and answer) is encoded at once, as a document would be.
#include <cstdint>
#include <string>
#include <vector>

#include "common/enum_names.h"
#include "data/prompt_tokenizer.h"
#include "models/modules/transformer.h"
#include "trainer/eval/task.h"

namespace segtrain::trainer {

// The prompt's form (eval.passkey.style): the usual digits, or the synthetic corpus's recall sentences.
enum class PasskeyStyle { digits, recall };
inline constexpr EnumName<PasskeyStyle> kPasskeyStyles[] = {{"digits", PasskeyStyle::digits},
                                                            {"recall", PasskeyStyle::recall}};


struct PasskeyPrompt {
  std::vector<int32_t> tokens;      // [BOS] the prompt's ids, ending with the question
  std::vector<int32_t> answer_ids;  // " " + answer in context: tokens + answer_ids encodes the whole text
  std::string answer;               // the key (digits) or the value (recall)
  double depth = 0;                 // where the key sits, as a fraction of the filler
};

// A prompt of at most `length` tokens with its answer (tokens + answer_ids), as
// much filler as fits. Deterministic in (seed, length, trial). InputError when
// `length` is too short for the prompt and one filler.
PasskeyPrompt make_passkey_prompt(const data::PromptTokenizer& tokenizer, PasskeyStyle style, int64_t length,
                                  uint64_t seed, int64_t trial);

// Whether greedy decoding after prompt.tokens reproduces prompt.answer_ids, in one
// forward (see passkey.cpp).
bool passkey_correct(models::TransformerLM& model, const PasskeyPrompt& prompt);

std::vector<TaskScore> passkey_accuracy(models::TransformerLM& model, const data::PromptTokenizer& tokenizer,
                                            PasskeyStyle style, const std::vector<int64_t>& lengths, int64_t trials,
                                       uint64_t seed);

// The passkey task of a suite (suite.h): eval.passkey.{lengths, trials, style}.
std::unique_ptr<EvalTask> make_passkey_task(const TaskSetup& setup);

}  // namespace segtrain::trainer
