#pragma once
// The evaluation suite: the tasks of `eval.tasks`, built in one place (suite.cpp
// registers each task's constructor by name) and run the same way by `Trainer`'s
// final evaluation, `segtrain eval` and every row of the experiment grid.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/prompt_tokenizer.h"
#include "trainer/config/config.h"
#include "trainer/eval/task.h"

namespace segtrain::trainer {

// The prompts' seed of `segtrain eval` and of an experiment's rows, so that a
// grid's task figures are `segtrain eval`'s for the same model (a run's final
// evaluation uses run.seed).
inline constexpr uint64_t kEvalPromptSeed = 1234;

class EvalSuite {
 public:
  // eval: eval.tasks and eval.<task>.*; lengths: what a task's `auto` lengths are
  // (eval.lengths, or a grid row's); perplexity: its windows; seed: the prompts'.
  EvalSuite(const EvalConfig& eval, const std::vector<int64_t>& lengths, const PerplexityOptions& perplexity,
            const std::string& split, uint64_t seed);
  const std::vector<std::unique_ptr<EvalTask>>& tasks() const { return tasks_; }
  bool writes_prompts() const;
  // The longest sequence any task gives the model.
  int64_t longest() const;
  // The store's tokenizer when a task writes prompts (nullopt otherwise), with
  // every prompt written once: an InputError prefixed by `where` when the store has
  // no tokenizer or a length is too short for a prompt.
  // split: the held-out text some tasks read (their real-text haystack).
  std::optional<data::PromptTokenizer> open_prompts(const std::string& store_path, const data::IndexedDataset& split,
                                                    const std::string& where) const;

 private:
  std::vector<std::unique_ptr<EvalTask>> tasks_;
};

// task.run, timed (result.seconds).
TaskResult run_task(const EvalTask& task, models::TransformerLM& model, const TaskData& data);

// How a caller runs the suite: which tasks it leaves out (figures it already holds,
// prompt tasks on ranks other than 0), whether each result is logged, and what is done
// with each as it comes (written, so that a later task that fails keeps them).
struct SuiteRun {
  std::function<bool(const EvalTask&)> skip;  // empty: every task runs
  std::function<void(const EvalTask&)> on_start;  // before each task that runs (what it is about to do)
  bool log = true;                            // task.log() of each result
  // After each task: the results so far, its own last.
  std::function<void(const EvalTask&, const std::vector<TaskResult>&)> on_result;
};

// The one way the suite runs (a run's periodic and final evaluation, `segtrain eval`, a
// grid row's and an imported row's more windows):
// its tasks in order, each timed, logged and handed to on_result.
std::vector<TaskResult> run_suite(const EvalSuite& suite, models::TransformerLM& model, const TaskData& data,
                                  const SuiteRun& how = {});

}  // namespace segtrain::trainer
