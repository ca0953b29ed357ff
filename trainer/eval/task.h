#pragma once
// An evaluation task: what it checks before any model work, how it runs on a
// model, what its figures depend on (the experiment grid's cache key) and how it
// logs them. Perplexity and every prompt task are one type; the suite
// (suite.h) builds them from `eval.tasks`, and `Trainer`, `segtrain eval` and the
// grid run it through run_suite. Callers ask a task what it does (writes_prompts,
// scores_windows), never its name. A new task is its own file plus a row in
// suite.cpp and in trainer/config/eval_tasks.cpp (its name and options).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/prompt_tokenizer.h"
#include "data/token_store.h"
#include "models/modules/transformer.h"
#include "trainer/config/eval_tasks.h"
#include "trainer/eval/perplexity.h"

namespace segtrain::trainer {

// A prompt task's score at one length: `correct` of `trials` (a fraction of a
// trial when the task gives part credit, as RULER's all-of-several-needles).
struct TaskScore {
  int64_t length = 0;
  int64_t trials = 0;
  double correct = 0;
  // What the model wrote for the first prompt, and what it was scored against (empty
  // for tasks scored without generating, as passkey's one forward).
  std::string first_output;
  std::vector<std::string> first_answers;
  double accuracy() const { return trials ? correct / static_cast<double>(trials) : 0.0; }
};

// What any task measured: by length, the loss over windows of a task that scores the
// store's windows (perplexity), else the prompts' scores.
struct TaskResult {
  std::string task;
  std::vector<LengthResult> perplexity;  // a window task's, by length
  std::vector<TaskScore> scores;         // a prompt task's, by length
  double seconds = 0;                    // wall time of run()
};

// What tasks read besides the model: the store's evaluation split, and its
// tokenizer when the suite writes prompts.
struct TaskData {
  const data::IndexedDataset* split = nullptr;
  const data::PromptTokenizer* prompts = nullptr;
};

// What a task is built from (suite.h).
struct TaskSetup {
  TaskOptions options;           // eval.<task>.*, lengths resolved (never auto)
  uint64_t seed = 0;             // the prompts' seed
  PerplexityOptions perplexity;  // the perplexity task's windows and lengths
  std::string split;             // the store split perplexity reads, as its settings record it
};

class EvalTask {
 public:
  virtual ~EvalTask() = default;
  virtual const std::string& name() const = 0;
  virtual bool writes_prompts() const = 0;
  // It scores the store's windows (perplexity by length; scores_windows in eval_tasks.h).
  bool scores_windows() const { return !writes_prompts(); }
  // The longest sequence it gives the model (factor auto stretches a model to it).
  virtual int64_t longest() const = 0;
  // What its figures depend on besides the model: equal settings, equal figures.
  virtual nlohmann::json settings() const = 0;
  // Writes every prompt it will give, so that a length too short for one (an
  // InputError) is refused before any model work.
  virtual void check(const TaskData& data) const = 0;
  virtual TaskResult run(models::TransformerLM& model, const TaskData& data) const = 0;
  // Its figures, one log line per length.
  virtual void log(const TaskResult& result) const = 0;
  // The config key of its lengths, for messages.
  virtual std::string lengths_key() const { return "eval." + name() + ".lengths"; }
  // Its figures as TensorBoard scalars (tag, value): a prompt task's accuracy by length,
  // "eval/<task>@<length>".
  virtual std::vector<std::pair<std::string, double>> scalars(const TaskResult& result) const {
    std::vector<std::pair<std::string, double>> out;
    for (const auto& s : result.scores) out.emplace_back("eval/" + name() + "@" + std::to_string(s.length), s.accuracy());
    return out;
  }
};

}  // namespace segtrain::trainer
