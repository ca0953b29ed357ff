#include "kernels/fused_kernels.h"

#include <cstdlib>

#include "common/error.h"

namespace segtrain::kernels {

bool fused_kernels_switch(const char* value) {
  if (value == nullptr || std::string(value).empty() || std::string(value) == "1") return true;
  if (std::string(value) == "0") return false;
  throw InputError("SEGTRAIN_FUSED_KERNELS=" + std::string(value) +
                   ": expected 0 (ATen's composites) or 1 (the project's CUDA kernels where a CUDA device runs)");
}

bool fused_kernels_requested() {
  // Read once: the model's forward asks on every call.
  static const bool requested = fused_kernels_switch(std::getenv("SEGTRAIN_FUSED_KERNELS"));
  return requested;
}

bool fused_kernels_built() { return SEGTRAIN_WITH_CUDA; }

std::string describe_fused_kernels(bool cuda_device) {
  const char* value = std::getenv("SEGTRAIN_FUSED_KERNELS");
  const bool asked = value != nullptr && std::string(value) == "1";  // said, not the default
  if (!fused_kernels_requested()) return cuda_device ? "ATen's composites (SEGTRAIN_FUSED_KERNELS=0)" : "";
  // The default says nothing where it cannot apply; a 1 the user set is answered.
  if (!fused_kernels_built()) return asked ? "SEGTRAIN_FUSED_KERNELS=1, but this build has no CUDA: ATen's composites" : "";
  if (!cuda_device) return asked ? "SEGTRAIN_FUSED_KERNELS=1, but the CPU computes ATen's composites" : "";
  return "fused CUDA kernels on (rope, rms_norm, 16-bit layer_norm, swiglu, alibi folded into q.k, cross-entropy; "
         "SEGTRAIN_FUSED_KERNELS=0: ATen's composites)";
}

}  // namespace segtrain::kernels
