#pragma once
// The evaluation tasks `eval.tasks` may list and the options each takes under
// `eval.<task>.*`: the catalog the config schema, `config reference` and the
// suite (trainer/eval/suite.cpp, which builds each task) read. Torch-free.
//
// perplexity reads the eval section's own keys (eval.lengths, max_sequences,
// stride, ...); every other task writes prompts with the store's tokenizer and
// scores what the model writes, at eval.<task>.lengths, eval.<task>.trials
// prompts each, and at most one choice of its own (passkey's style).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace segtrain::trainer {

struct TaskOptions {
  std::vector<int64_t> lengths;  // prompt lengths; empty: auto (eval.lengths, or a grid row's lengths)
  int64_t trials = 0;            // prompts per length
  std::string variant;           // the task's one choice (EvalTaskInfo::variant_key); "" when it has none
};

struct EvalTaskInfo {
  std::string name;   // as eval.tasks lists it
  std::string title;  // as results.md names its table: "Passkey retrieval"
  std::string doc;
  bool writes_prompts = true;        // false: perplexity, which reads the store's windows
  int64_t trials = 0;                // default prompts per length
  std::string variant_key;           // e.g. "style"; "" when the task has no choice
  std::vector<std::string> variants;  // the first is the default
  std::string variant_doc;
};

// Every task, in the order a suite runs them (perplexity first).
const std::vector<EvalTaskInfo>& eval_task_catalog();
// nullptr when `name` is no task.
const EvalTaskInfo* find_eval_task(const std::string& name);
// Whether `task` scores the store's windows (perplexity by length) rather than prompts: its
// figures are eval.json's "results" and an experiment's tables, and more windows continue it.
bool scores_windows(const std::string& task);
// "perplexity, passkey, ...".
std::string eval_task_names();
// The task whose option `key` is ("eval.passkey.trials" -> "passkey"); "" for any other key.
std::string task_of_key(const std::string& key);
// The task whose option `key` is when `tasks` does not list it (its option would be read
// and never used: the run config and `segtrain eval` refuse it); "" otherwise.
std::string unlisted_task_of_key(const std::string& key, const std::vector<std::string>& tasks);
// Each prompt task's options at their defaults.
std::map<std::string, TaskOptions> default_task_options();

}  // namespace segtrain::trainer
