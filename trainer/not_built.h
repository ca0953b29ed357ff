#pragma once
#include <string>

#include "common/error.h"

namespace segtrain::trainer {

// What a subcommand does until the issue that owns it lands: say so, exit 2.
[[noreturn]] inline void not_built(const std::string& command, int issue) {
  throw InputError("`segtrain " + command + "` is not built yet (tracked in issue " + std::to_string(issue) + ")");
}

}  // namespace segtrain::trainer
