#pragma once
// A config value that breaks a rule, named by its key: what the torch-free rule
// functions beside each config struct return (data/sampler_rules.h), so that the
// validator can report it at the file's line and a constructor can refuse it.
#include <string>
#include <vector>

#include "common/error.h"

namespace segtrain {

struct ConfigProblem {
  std::string key;      // "data.sampler.alpha"
  std::string message;  // what is wrong and what would be right, without the key
};

// The first problem as InputError "key: message" (a constructor's last guard).
inline void throw_first(const std::vector<ConfigProblem>& problems) {
  if (!problems.empty()) throw InputError(problems.front().key + ": " + problems.front().message);
}

}  // namespace segtrain
