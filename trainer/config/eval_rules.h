#pragma once
// The evaluation windows' rule, in one place: the validator reports it at the
// config file's line, `segtrain eval` for its --stride flag, and evaluate()
// refuses it as a last guard (the experiment grid scores its rows at lengths of
// its own). Torch-free, as the rest of the config library.
#include <cstdint>
#include <vector>

#include "common/config_problem.h"

namespace segtrain::trainer {

// A sliding window must overlap the one before it: a stride (0: non-overlapping
// windows) shorter than every length. Keyed "eval.stride"; empty when it holds.
std::vector<ConfigProblem> window_problems(int64_t stride, const std::vector<int64_t>& lengths);

}  // namespace segtrain::trainer
