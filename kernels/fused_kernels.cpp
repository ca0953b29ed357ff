#include "kernels/fused_kernels.h"

#include <cstdlib>

#include "common/error.h"

namespace segtrain::kernels {

FusedKernels fused_kernels_switch(const char* value) {
  const std::string v = value == nullptr ? "" : value;
  if (v.empty() || v == "1") return FusedKernels::on;
  if (v == "0") return FusedKernels::off;
  if (v == "all") return FusedKernels::all;
  throw InputError("SEGTRAIN_FUSED_KERNELS=" + v +
                   ": expected 0 (ATen's composites), 1 (the project's CUDA kernels where a CUDA device runs) or all "
                   "(also the kernels no GPU has run yet)");
}

FusedKernels fused_kernels_level() {
  // Read once: the model's forward asks on every call.
  static const FusedKernels level = fused_kernels_switch(std::getenv("SEGTRAIN_FUSED_KERNELS"));
  return level;
}

bool fused_kernels_requested() { return fused_kernels_level() != FusedKernels::off; }

bool untested_kernels_requested() { return fused_kernels_level() == FusedKernels::all; }

bool fused_kernels_built() { return SEGTRAIN_WITH_CUDA; }

std::string describe_fused_kernels(bool cuda_device) {
  const char* value = std::getenv("SEGTRAIN_FUSED_KERNELS");
  const std::string said = value == nullptr ? "" : value;  // "1" or "all": said, not the default
  const bool asked = said == "1" || said == "all";
  if (!fused_kernels_requested()) return cuda_device ? "ATen's composites (SEGTRAIN_FUSED_KERNELS=0)" : "";
  // The default says nothing where it cannot apply; a value the user set is answered.
  if (!fused_kernels_built())
    return asked ? "SEGTRAIN_FUSED_KERNELS=" + said + ", but this build has no CUDA: ATen's composites" : "";
  if (!cuda_device) return asked ? "SEGTRAIN_FUSED_KERNELS=" + said + ", but the CPU computes ATen's composites" : "";
  const std::string tested = "rope, rms_norm, 16-bit layer_norm, swiglu, alibi folded into q.k, cross-entropy";
  if (untested_kernels_requested())
    return "fused CUDA kernels on (" + tested +
           "; and, not yet run on a GPU, the linears' bias gradients with GELU's and the residual add with the "
           "norm after it; SEGTRAIN_FUSED_KERNELS=0: ATen's composites)";
  return "fused CUDA kernels on (" + tested + "; SEGTRAIN_FUSED_KERNELS=0: ATen's composites)";
}

}  // namespace segtrain::kernels
