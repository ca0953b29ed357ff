#pragma once
// Perplexity by length (perplexity.h) as a task of the suite.
#include <memory>

#include "trainer/eval/task.h"

namespace segtrain::trainer {

std::unique_ptr<EvalTask> make_perplexity_task(const TaskSetup& setup);

}  // namespace segtrain::trainer
