#include "trainer/eval/passkey.h"

#include <algorithm>
#include <random>

#include "common/error.h"
#include "common/log.h"
#include "common/signals.h"
#include "trainer/eval/eval_mode.h"

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

// intro, `repeats` fillers with the needle before filler `needle_at`, the question.
std::string prompt_text(const Template& t, int64_t repeats, int64_t needle_at) {
  std::string text = t.intro;
  for (int64_t i = 0; i <= repeats; ++i) {
    if (i == needle_at) text += t.needle;
    if (i < repeats) text += t.filler;
  }
  text += t.question;
  if (t.intro.empty() && text.starts_with(' ')) text.erase(0, 1);  // a document does not start with a space
  return text;
}


}  // namespace

PasskeyPrompt make_passkey_prompt(const data::PromptTokenizer& tokenizer, PasskeyStyle style, int64_t length,
                                  uint64_t seed, int64_t trial) {
  std::mt19937_64 rng(seed * 1000003ULL + static_cast<uint64_t>(length) * 7919ULL + static_cast<uint64_t>(trial));
  const Template t = make_template(style, rng);
  const uint64_t depth_draw = rng();
  const int64_t bos = tokenizer.bos_id() >= 0 ? 1 : 0;
  const int64_t filler = static_cast<int64_t>(tokenizer.encode(t.filler).size());
  const int64_t fixed = bos + static_cast<int64_t>(tokenizer.encode(t.intro + t.needle + t.question + " " + t.answer).size());
  auto too_short = [&] {
    return InputError("passkey: length " + std::to_string(length) + " is too short for a prompt of " +
                      std::to_string(fixed) + " tokens plus filler");
  };
  int64_t repeats = filler > 0 ? (length - fixed) / filler : 0;
  if (repeats < 1) throw too_short();

  // The whole text, prompt and answer, is encoded at once as a document would be; the
  // answer's ids are what that encoding adds to the prompt's own (so " 71432" is
  // tokenized in context, and a sentencepiece model adds no "▁" of its own before it).
  auto build = [&](int64_t r) {
    PasskeyPrompt p;
    const int64_t needle_at = static_cast<int64_t>(depth_draw % static_cast<uint64_t>(r + 1));
    const std::string text = prompt_text(t, r, needle_at);
    p.tokens = tokenizer.encode_prompt(text);
    const auto whole = tokenizer.encode_prompt(text + " " + t.answer);
    if (whole.size() <= p.tokens.size() || !std::equal(p.tokens.begin(), p.tokens.end(), whole.begin()))
      throw InputError("passkey: the store's " + tokenizer.kind() + " tokenizer does not keep the answer ' " + t.answer +
                       "' apart from the question ('" + t.question + "'): the prompt's ids are not a prefix of the "
                       "whole text's");
    p.answer_ids.assign(whole.begin() + static_cast<std::ptrdiff_t>(p.tokens.size()), whole.end());
    p.answer = t.answer;
    p.depth = static_cast<double>(needle_at) / static_cast<double>(r);
    return p;
  };
  auto size = [](const PasskeyPrompt& p) { return static_cast<int64_t>(p.tokens.size() + p.answer_ids.size()); };
  // Filler pieces may encode a little differently in context: fit by whole fillers.
  PasskeyPrompt prompt = build(repeats);
  while (size(prompt) > length) {
    repeats -= std::max<int64_t>(1, (size(prompt) - length + filler - 1) / filler);
    if (repeats < 1) throw too_short();
    prompt = build(repeats);
  }
  for (PasskeyPrompt more = build(repeats + 1); size(more) <= length; more = build(++repeats + 1)) prompt = std::move(more);
  return prompt;
}

// Teacher forcing: prompt + answer (all but its last id) in one forward, the LM head
// only at the positions that predict the answer's ids, correct iff the argmax at every
// one of them is the answer's id. This is exactly greedy decoding reproducing the
// answer's ids: by induction, while greedy decoding has produced answer[0..k), its
// input is the teacher-forced one, and under the causal mask the logits at a position
// depend only on the tokens up to it; a first wrong argmax is where greedy decoding
// leaves the answer. One forward instead of one per answer token (the prompts are long).
// For positions that depend on the input's length (dynamic NTK, dynamic interpolation,
// LongRoPE; models::positions_depend_on_length) the forward sees the prompt and answer
// at once, where greedy decoding would see a few tokens fewer at its first steps: the
// same scoring for every row, within a few tokens of greedy decoding there.
bool passkey_correct(models::TransformerLM& model, const PasskeyPrompt& prompt) {
  if (prompt.tokens.empty() || prompt.answer_ids.empty()) throw std::invalid_argument("passkey: empty prompt or answer");
  const EvalMode eval_mode(model);
  const auto device = model->parameters().front().device();
  std::vector<int64_t> ids(prompt.tokens.begin(), prompt.tokens.end());
  ids.insert(ids.end(), prompt.answer_ids.begin(), prompt.answer_ids.end() - 1);
  const auto n = static_cast<int64_t>(ids.size()), k = static_cast<int64_t>(prompt.answer_ids.size());
  const at::Tensor x = at::tensor(ids, at::kLong).unsqueeze(0).to(device);
  const at::Tensor host_positions = at::arange(n, at::kLong).unsqueeze(0);
  const auto bounds = models::PositionBounds::of(host_positions);  // on the host: the forward never syncs
  const at::Tensor at_answer = model->hidden(x, host_positions.to(device), bounds).narrow(1, n - k, k);
  const at::Tensor predicted = model->logits(at_answer)[0].argmax(-1).to(at::kCPU);
  const std::vector<int64_t> answer(prompt.answer_ids.begin(), prompt.answer_ids.end());
  return at::equal(predicted, at::tensor(answer, at::kLong));
}

std::vector<TaskScore> passkey_accuracy(models::TransformerLM& model, const data::PromptTokenizer& tokenizer,
                                       PasskeyStyle style, const std::vector<int64_t>& lengths, int64_t trials,
                                       uint64_t seed) {
  std::vector<TaskScore> results;
  for (int64_t length : lengths) {
    TaskScore r;
    r.length = length;
    for (int64_t trial = 0; trial < trials; ++trial) {
      throw_if_stopped();  // a stop waits for one prompt at most
      r.correct += passkey_correct(model, make_passkey_prompt(tokenizer, style, length, seed, trial));
      ++r.trials;
    }
    results.push_back(r);
  }
  return results;
}

namespace {

class PasskeyTask final : public EvalTask {
 public:
  explicit PasskeyTask(const TaskSetup& setup)
      : options_(setup.options), style_(*enum_from_name(kPasskeyStyles, setup.options.variant)), seed_(setup.seed) {}
  const std::string& name() const override { return name_; }
  bool writes_prompts() const override { return true; }
  int64_t longest() const override { return *std::max_element(options_.lengths.begin(), options_.lengths.end()); }
  // The keys (and their order of meaning) of the grid's records before eval.tasks: a
  // grid's finished rows keep their passkey figures.
  nlohmann::json settings() const override {
    return {{"lengths", options_.lengths}, {"trials", options_.trials},
            {"style", options_.variant},   {"seed", seed_}};
  }
  void check(const TaskData& data) const override {
    for (int64_t length : options_.lengths)
      for (int64_t trial = 0; trial < options_.trials; ++trial)
        make_passkey_prompt(*data.prompts, style_, length, seed_, trial);
  }
  TaskResult run(models::TransformerLM& model, const TaskData& data) const override {
    TaskResult result{name_, {}, {}, 0};
    result.scores = passkey_accuracy(model, *data.prompts, style_, options_.lengths, options_.trials, seed_);
    return result;
  }
  void log(const TaskResult& result) const override {
    for (const auto& p : result.scores) log::info("passkey L=", p.length, ": ", p.correct, "/", p.trials, " correct");
  }

 private:
  std::string name_ = "passkey";
  TaskOptions options_;
  PasskeyStyle style_;
  uint64_t seed_;
};

}  // namespace

std::unique_ptr<EvalTask> make_passkey_task(const TaskSetup& setup) { return std::make_unique<PasskeyTask>(setup); }

}  // namespace segtrain::trainer
