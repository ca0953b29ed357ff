#pragma once
// Passkey retrieval (Mohtashami & Jaggi 2023): a key is hidden at a random depth
// of filler text, the prompt ends by asking for it, and the model must produce it
// by greedy decoding. Accuracy by prompt length shows whether the model really
// uses distant context.
//   digits : "The pass key is 71432. Remember it. ..." in repeated filler (the usual form)
//   recall : the synthetic corpus's own form, "the password of X is Y ." ...
//            "recall : the password of X is", for models trained on `segtrain synth`
#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "models/transformer.h"
#include "trainer/config/config.h"

namespace segtrain::trainer {


struct PasskeyResult {
  int64_t length = 0;
  int64_t trials = 0;
  int64_t correct = 0;
  double accuracy() const { return trials ? static_cast<double>(correct) / trials : 0.0; }
};

struct PasskeyPrompt {
  std::vector<int32_t> tokens;  // at most `length` tokens including room for the answer
  std::string answer;
  double depth = 0;  // where the key sits, as a fraction of the filler
};

// Deterministic in (seed, length, trial).
PasskeyPrompt make_passkey_prompt(const data::Tokenizer& tokenizer, PasskeyStyle style, int64_t length,
                                  uint64_t seed, int64_t trial);

std::vector<PasskeyResult> passkey_accuracy(models::TransformerLM& model, const data::Tokenizer& tokenizer,
                                            PasskeyStyle style, const std::vector<int64_t>& lengths, int64_t trials,
                                            uint64_t seed);

}  // namespace segtrain::trainer
