#include <torch/version.h>

#include "trainer/cli/command.h"

#ifndef SEGTRAIN_VERSION
#define SEGTRAIN_VERSION "unknown"
#endif
#ifndef SEGTRAIN_BUILD_TYPE
#define SEGTRAIN_BUILD_TYPE "unknown"
#endif

namespace segtrain::trainer::cli {

std::string version_text() {
  std::string text = "segtrain " SEGTRAIN_VERSION "\n";
  text += "LibTorch " TORCH_VERSION "\n";
  text += "build type " SEGTRAIN_BUILD_TYPE "\n";
  text += std::string("CUDA ") + (SEGTRAIN_WITH_CUDA ? "yes" : "no") + "\n";
  text += std::string("NCCL ") + (SEGTRAIN_WITH_NCCL ? "yes" : "no");
  return text;
}

}  // namespace segtrain::trainer::cli
