#include "trainer/eval/passkey.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <random>

#include "common/error.h"

namespace segtrain::trainer {
namespace {

std::string random_word(std::mt19937_64& rng, int syllables) {
  static const char* consonants = "bdfgklmnprstvz";
  static const char* vowels = "aeiou";
  std::string word;
  for (int i = 0; i < syllables; ++i) {
    word += consonants[rng() % 14];
    word += vowels[rng() % 5];
  }
  return word;
}

struct Template {
  std::string intro, filler, needle, question, answer;
};

Template make_template(PasskeyStyle style, std::mt19937_64& rng) {
  if (style == PasskeyStyle::digits) {
    const std::string key = std::to_string(10000 + rng() % 90000);
    return {"There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
            "I will quiz you about the important information there.",
            " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.",
            " The pass key is " + key + ". Remember it. " + key + " is the pass key.",
            " What is the pass key? The pass key is", key};
  }
  const std::string name = random_word(rng, 3), value = random_word(rng, 4);
  return {"", " the quiet river meets the old bridge near the market .",
          " the password of " + name + " is " + value + " .", " recall : the password of " + name + " is", value};
}

std::vector<int32_t> encode(const data::Tokenizer& tokenizer, const std::string& text) {
  std::vector<int32_t> ids;
  if (!text.empty()) tokenizer.encode(text, ids);
  return ids;
}

// Letters and digits only, so spacing differences between tokenizers do not matter.
std::string normalized(const std::string& text) {
  std::string out;
  for (char c : text)
    if (std::isalnum(static_cast<unsigned char>(c))) out += c;
  return out;
}

}  // namespace

PasskeyPrompt make_passkey_prompt(const data::Tokenizer& tokenizer, PasskeyStyle style, int64_t length,
                                  uint64_t seed, int64_t trial) {
  std::mt19937_64 rng(seed * 1000003ULL + static_cast<uint64_t>(length) * 7919ULL + static_cast<uint64_t>(trial));
  const Template t = make_template(style, rng);
  const auto intro = encode(tokenizer, t.intro), filler = encode(tokenizer, t.filler);
  const auto needle = encode(tokenizer, t.needle), question = encode(tokenizer, t.question);
  const int64_t answer_room = static_cast<int64_t>(encode(tokenizer, " " + t.answer).size()) + 2;
  const int64_t fixed = static_cast<int64_t>(intro.size() + needle.size() + question.size()) + answer_room;
  const int64_t repeats = filler.empty() ? 0 : std::max<int64_t>(0, (length - fixed) / static_cast<int64_t>(filler.size()));
  if (repeats < 1)
    throw InputError("passkey: length " + std::to_string(length) + " is too short for a prompt of " +
                     std::to_string(fixed) + " tokens plus filler");
  const int64_t needle_at = static_cast<int64_t>(rng() % static_cast<uint64_t>(repeats + 1));
  PasskeyPrompt prompt;
  prompt.answer = t.answer;
  prompt.depth = static_cast<double>(needle_at) / static_cast<double>(repeats);
  prompt.tokens = intro;
  for (int64_t i = 0; i <= repeats; ++i) {
    if (i == needle_at) prompt.tokens.insert(prompt.tokens.end(), needle.begin(), needle.end());
    if (i < repeats) prompt.tokens.insert(prompt.tokens.end(), filler.begin(), filler.end());
  }
  prompt.tokens.insert(prompt.tokens.end(), question.begin(), question.end());
  return prompt;
}

std::vector<PasskeyResult> passkey_accuracy(models::TransformerLM& model, const data::Tokenizer& tokenizer,
                                            PasskeyStyle style, const std::vector<int64_t>& lengths, int64_t trials,
                                            uint64_t seed) {
  at::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  const auto device = model->parameters().front().device();
  std::vector<PasskeyResult> results;
  for (int64_t length : lengths) {
    PasskeyResult r;
    r.length = length;
    for (int64_t trial = 0; trial < trials; ++trial) {
      PasskeyPrompt prompt = make_passkey_prompt(tokenizer, style, length, seed, trial);
      std::vector<int32_t> ids = prompt.tokens;
      const size_t answer_tokens = encode(tokenizer, " " + prompt.answer).size() + 2;
      std::vector<int32_t> generated;
      // Greedy decoding without a cache: prompts are evaluated a handful of times.
      for (size_t k = 0; k < answer_tokens && static_cast<int64_t>(ids.size()) < length; ++k) {
        const int64_t n = static_cast<int64_t>(ids.size());
        at::Tensor x = at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong).unsqueeze(0).to(device);
        at::Tensor positions = at::arange(n, at::kLong).unsqueeze(0).to(device);
        // The head at the last position only: the next token is all greedy decoding needs.
        const at::Tensor last = model->hidden(x, positions).select(1, n - 1);
        const int32_t next = static_cast<int32_t>(model->logits(last)[0].argmax().item<int64_t>());
        ids.push_back(next);
        generated.push_back(next);
      }
      const std::string said = normalized(tokenizer.decode(generated));
      r.correct += said.rfind(normalized(prompt.answer), 0) == 0;
      ++r.trials;
    }
    results.push_back(r);
  }
  if (was_training) model->train();
  return results;
}

}  // namespace segtrain::trainer
