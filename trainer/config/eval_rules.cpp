#include "trainer/config/eval_rules.h"

#include <string>

namespace segtrain::trainer {

std::vector<ConfigProblem> window_problems(int64_t stride, const std::vector<int64_t>& lengths) {
  for (int64_t length : lengths)
    if (stride > 0 && stride >= length)
      return {{"eval.stride", std::to_string(stride) + " is not shorter than the evaluation length " +
                                  std::to_string(length) +
                                  "; a sliding window must overlap (0 gives non-overlapping windows)"}};
  return {};
}

}  // namespace segtrain::trainer
