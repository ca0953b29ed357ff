#include "trainer/eval/suite.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "common/error.h"
#include "trainer/eval/passkey.h"
#include "trainer/eval/perplexity_task.h"
#include "trainer/eval/ruler_tasks.h"

namespace segtrain::trainer {
namespace {

using TaskFactory = std::unique_ptr<EvalTask> (*)(const TaskSetup&);

// Every task by its eval.tasks name (its options: trainer/config/eval_tasks.cpp).
const std::map<std::string, TaskFactory>& task_factories() {
  static const std::map<std::string, TaskFactory> factories = {
      {"perplexity", make_perplexity_task},
      {"passkey", make_passkey_task},
      {"niah_single", make_niah_single_task},
      {"niah_multikey", make_niah_multikey_task},
      {"niah_multivalue", make_niah_multivalue_task},
      {"niah_multiquery", make_niah_multiquery_task},
      {"vt", make_vt_task},
      {"cwe", make_cwe_task},
  };
  return factories;
}

}  // namespace

EvalSuite::EvalSuite(const EvalConfig& eval, const std::vector<int64_t>& lengths, const PerplexityOptions& perplexity,
                     const std::string& split, uint64_t seed) {
  // In the catalog's order whatever eval.tasks' (perplexity first: a data-parallel run
  // scores it on every rank before rank 0 alone runs the prompt tasks).
  for (const auto& info : eval_task_catalog()) {
    const std::string& name = info.name;
    if (std::find(eval.tasks.begin(), eval.tasks.end(), name) == eval.tasks.end()) continue;
    const auto factory = task_factories().find(name);
    if (factory == task_factories().end()) throw std::logic_error("evaluation task '" + name + "' is not registered");
    TaskSetup setup;
    if (const auto options = eval.task.find(name); options != eval.task.end()) setup.options = options->second;
    if (setup.options.lengths.empty()) setup.options.lengths = lengths;
    std::sort(setup.options.lengths.begin(), setup.options.lengths.end());
    setup.seed = seed;
    setup.perplexity = perplexity;
    setup.perplexity.lengths = lengths;
    setup.split = split;
    tasks_.push_back(factory->second(setup));
  }
}

bool EvalSuite::writes_prompts() const {
  return std::any_of(tasks_.begin(), tasks_.end(), [](const auto& t) { return t->writes_prompts(); });
}

int64_t EvalSuite::longest() const {
  int64_t longest = 0;
  for (const auto& t : tasks_) longest = std::max(longest, t->longest());
  return longest;
}

std::optional<data::PromptTokenizer> EvalSuite::open_prompts(const std::string& store_path,
                                                             const data::IndexedDataset& split,
                                                             const std::string& where) const {
  if (!writes_prompts()) return std::nullopt;
  // The store's tokenizer is named with the first task that needs it; a prompt too short, with its own task.
  const EvalTask* current =
      std::find_if(tasks_.begin(), tasks_.end(), [](const auto& t) { return t->writes_prompts(); })->get();
  try {
    std::optional<data::PromptTokenizer> prompts = data::open_prompt_tokenizer(store_path);
    const TaskData data{&split, &*prompts};
    for (const auto& t : tasks_) {
      current = t.get();
      t->check(data);
    }
    return prompts;
  } catch (const InputError& e) {
    throw InputError(where + ": " + current->name() + ": " + e.what());
  }
}

TaskResult run_task(const EvalTask& task, models::TransformerLM& model, const TaskData& data) {
  const auto started = std::chrono::steady_clock::now();
  TaskResult result = task.run(model, data);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

std::vector<TaskResult> run_suite(const EvalSuite& suite, models::TransformerLM& model, const TaskData& data,
                                  const SuiteRun& how) {
  std::vector<TaskResult> results;
  for (const auto& task : suite.tasks()) {
    if (how.skip && how.skip(*task)) continue;
    if (how.on_start) how.on_start(*task);
    results.push_back(run_task(*task, model, data));
    if (how.log) task->log(results.back());
    if (how.on_result) how.on_result(*task, results);
  }
  return results;
}

}  // namespace segtrain::trainer
