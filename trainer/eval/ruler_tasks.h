#pragma once
// RULER's tasks (ruler_prompts.h) as tasks of the evaluation suite: each prompt is
// answered by greedy decoding with the KV cache (generate.h) and scored as RULER
// scores it; accuracy by length is the mean score of eval.<task>.trials prompts.
#include <memory>

#include "trainer/eval/task.h"

namespace segtrain::trainer {

std::unique_ptr<EvalTask> make_niah_single_task(const TaskSetup& setup);
std::unique_ptr<EvalTask> make_niah_multikey_task(const TaskSetup& setup);
std::unique_ptr<EvalTask> make_niah_multivalue_task(const TaskSetup& setup);
std::unique_ptr<EvalTask> make_niah_multiquery_task(const TaskSetup& setup);
std::unique_ptr<EvalTask> make_vt_task(const TaskSetup& setup);
std::unique_ptr<EvalTask> make_cwe_task(const TaskSetup& setup);

}  // namespace segtrain::trainer
