#include "trainer/eval/ruler_tasks.h"

#include <algorithm>
#include <sstream>

#include "common/log.h"
#include "common/signals.h"
#include "trainer/eval/generate.h"
#include "trainer/eval/ruler_prompts.h"

namespace segtrain::trainer {
namespace {

// The lines of the split's documents, from the first, until they hold about
// `tokens` tokens (the real-text haystack; every task and row reads the same).
std::vector<std::string> held_out_lines(const data::IndexedDataset& split, const data::PromptTokenizer& tokenizer,
                                        int64_t tokens) {
  std::vector<std::string> lines;
  int64_t read = 0;
  for (int64_t doc = 0; doc < split.documents() && read < tokens; ++doc) {
    std::vector<int32_t> ids = split.document(doc);
    // BOS and EOS would be written as their text ("<|endoftext|>"), and read back as the token.
    ids.erase(std::remove_if(ids.begin(), ids.end(),
                             [&](int32_t id) { return id == tokenizer.bos_id() || id == tokenizer.eos_id(); }),
              ids.end());
    read += static_cast<int64_t>(ids.size());
    std::istringstream text(tokenizer.decode(ids));
    for (std::string line; std::getline(text, line);)  // a blank line is no haystack unit
      if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(line);
  }
  return lines;
}

class RulerEvalTask final : public EvalTask {
 public:
  RulerEvalTask(std::string name, RulerTask task, const TaskSetup& setup)
      : name_(std::move(name)), task_(task), options_(setup.options), seed_(setup.seed), split_(setup.split) {
    haystack_ = options_.variant == "text" ? Haystack::text
                : options_.variant == "needles" ? Haystack::needles
                                                : Haystack::noise;
  }
  const std::string& name() const override { return name_; }
  bool writes_prompts() const override { return true; }
  int64_t longest() const override { return options_.lengths.back(); }
  nlohmann::json settings() const override {
    // "prompts": the version of segtrain's prompt writer, raised when what it writes changes.
    nlohmann::json j = {{"lengths", options_.lengths}, {"trials", options_.trials}, {"seed", seed_},
                        {"ruler", "c3f5e3b"}, {"prompts", 1}};
    if (!options_.variant.empty()) j["haystack"] = options_.variant;
    if (haystack_ == Haystack::text) j["split"] = split_;
    return j;
  }
  // Every prompt it will give: one too short for the task is refused before any model work.
  void check(const TaskData& data) const override {
    const auto lines = text_lines(data);
    for (int64_t length : options_.lengths)
      for (int64_t trial = 0; trial < options_.trials; ++trial)
        make_ruler_prompt(task_, haystack_, *data.prompts, lines, length, seed_, trial);
  }
  TaskResult run(models::TransformerLM& model, const TaskData& data) const override {
    const auto lines = text_lines(data);
    const c10::Device device = model->parameters().front().device();
    TaskResult result{name_, {}, {}, 0};
    for (int64_t length : options_.lengths) {
      TaskScore score;
      score.length = length;
      for (int64_t trial = 0; trial < options_.trials; ++trial) {
        throw_if_stopped();  // a 16k prompt is minutes on a CPU: a stop waits for one at most
        const RulerPrompt prompt = make_ruler_prompt(task_, haystack_, *data.prompts, lines, length, seed_, trial);
        Decoding decoding;
        decoding.max_new_tokens = prompt.max_new_tokens;
        decoding.eos_id = data.prompts->eos_id();  // as transformers' generate stops
        // Greedy, as RULER; once every answer is written, more tokens cannot change the score.
        decoding.done = [&](const std::vector<int32_t>& written) {
          return ruler_score(data.prompts->decode(written), prompt.answers) == 1.0;
        };
        const std::string output = data.prompts->decode(generate_tokens(model, prompt.tokens, decoding, device));
        score.correct += ruler_score(output, prompt.answers);
        if (trial == 0) score.first_output = output, score.first_answers = prompt.answers;
        ++score.trials;
      }
      result.scores.push_back(score);
    }
    return result;
  }
  void log(const TaskResult& result) const override {
    for (const auto& s : result.scores)
      log::info(name_, " L=", s.length, ": ", s.correct, "/", s.trials, " (", 100 * s.accuracy(), "%)");
  }

 private:
  std::vector<std::string> text_lines(const TaskData& data) const {
    if (haystack_ != Haystack::text || !data.split) return {};
    return held_out_lines(*data.split, *data.prompts, 2 * longest());
  }

  std::string name_;
  RulerTask task_;
  Haystack haystack_;
  TaskOptions options_;
  uint64_t seed_;
  std::string split_;
};

}  // namespace

std::unique_ptr<EvalTask> make_niah_single_task(const TaskSetup& s) {
  return std::make_unique<RulerEvalTask>("niah_single", RulerTask::niah_single, s);
}
std::unique_ptr<EvalTask> make_niah_multikey_task(const TaskSetup& s) {
  return std::make_unique<RulerEvalTask>("niah_multikey", RulerTask::niah_multikey, s);
}
std::unique_ptr<EvalTask> make_niah_multivalue_task(const TaskSetup& s) {
  return std::make_unique<RulerEvalTask>("niah_multivalue", RulerTask::niah_multivalue, s);
}
std::unique_ptr<EvalTask> make_niah_multiquery_task(const TaskSetup& s) {
  return std::make_unique<RulerEvalTask>("niah_multiquery", RulerTask::niah_multiquery, s);
}
std::unique_ptr<EvalTask> make_vt_task(const TaskSetup& s) { return std::make_unique<RulerEvalTask>("vt", RulerTask::vt, s); }
std::unique_ptr<EvalTask> make_cwe_task(const TaskSetup& s) { return std::make_unique<RulerEvalTask>("cwe", RulerTask::cwe, s); }

}  // namespace segtrain::trainer
