#include "trainer/config/eval_tasks.h"

#include <algorithm>

namespace segtrain::trainer {

namespace {
constexpr const char* kHaystackDoc =
    "What fills the context: noise, RULER's repeated 'The grass is green...' line; text, lines of the store's "
    "held-out documents (as RULER's essays)";
}  // namespace

const std::vector<EvalTaskInfo>& eval_task_catalog() {
  static const std::vector<EvalTaskInfo> catalog = {
      {"perplexity", "Perplexity", "Perplexity by length on the store's windows (eval.lengths, eval.max_sequences, ...).", false,
       0, "", {}, ""},
      {"passkey", "Passkey retrieval",
       "Passkey retrieval (Mohtashami & Jaggi 2023): a 5-digit key at a random depth of filler, scored by greedy "
       "decoding of the key.",
       true, 5, "style", {"digits", "recall"},
       "digits: the usual pass-key prompt; recall: the synthetic corpus's 'recall : the password of X is' form."},
      // RULER's tasks (trainer/eval/ruler_prompts.h): greedy output scored by string_match_all.
      {"niah_single", "Needle in a haystack (RULER niah_single)",
       "RULER's single needle: a 7-digit number for an adjective-noun key, asked for after the haystack.", true, 10,
       "haystack", {"noise", "text"}, kHaystackDoc},
      {"niah_multikey", "Needle in a haystack, several keys (RULER niah_multikey)",
       "RULER's multi-key needle: the number of one key among 4 keys' needles (text, noise), or among a haystack "
       "made of distractor needles (needles: RULER's niah_multikey_2).",
       true, 10, "haystack", {"text", "noise", "needles"},
       std::string(kHaystackDoc) + "; needles: every line a distractor needle"},
      {"niah_multivalue", "Needle in a haystack, several values (RULER niah_multivalue)",
       "RULER's multi-value needle: all 4 numbers of one key; each found scores a quarter.", true, 10, "haystack",
       {"text", "noise"}, kHaystackDoc},
      {"niah_multiquery", "Needle in a haystack, several queries (RULER niah_multiquery)",
       "RULER's multi-query needle: the numbers of 4 keys asked for at once; each found scores a quarter.", true, 10,
       "haystack", {"text", "noise"}, kHaystackDoc},
      {"vt", "Variable tracking (RULER vt)",
       "RULER's variable tracking: one chain of 4 hops (VAR B = VAR A ...) in noise, after a worked example; the 5 "
       "names assigned the value, each found scoring a fifth.",
       true, 10, "", {}, ""},
      {"cwe", "Common words extraction (RULER cwe)",
       "RULER's common-words extraction: the 10 words that appear 30 times in a numbered list of words that "
       "otherwise appear 3 times, after a worked example; each found scores a tenth.",
       true, 10, "", {}, ""},
  };
  return catalog;
}

const EvalTaskInfo* find_eval_task(const std::string& name) {
  for (const auto& task : eval_task_catalog())
    if (task.name == name) return &task;
  return nullptr;
}

std::string unlisted_task_of_key(const std::string& key, const std::vector<std::string>& tasks) {
  std::string task = task_of_key(key);
  return task.empty() || std::find(tasks.begin(), tasks.end(), task) != tasks.end() ? "" : task;
}

bool scores_windows(const std::string& task) {
  const EvalTaskInfo* info = find_eval_task(task);
  return info && !info->writes_prompts;
}

std::string eval_task_names() {
  std::string out;
  for (const auto& task : eval_task_catalog()) out += (out.empty() ? "" : ", ") + task.name;
  return out;
}

std::string task_of_key(const std::string& key) {
  for (const auto& task : eval_task_catalog())
    if (task.writes_prompts && key.rfind("eval." + task.name + ".", 0) == 0) return task.name;
  return "";
}

std::map<std::string, TaskOptions> default_task_options() {
  std::map<std::string, TaskOptions> options;
  for (const auto& task : eval_task_catalog())
    if (task.writes_prompts) options[task.name] = {{}, task.trials, task.variants.empty() ? "" : task.variants.front()};
  return options;
}

}  // namespace segtrain::trainer
