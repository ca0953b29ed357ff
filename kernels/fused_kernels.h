#pragma once
// Whether the project's own CUDA kernels (kernels/) and ATen's fused paths (ATen's fused RMSNorm,
// LayerNorm in 16 bits outside autocast, ALiBi folded into q.k: models/modules/alibi_folded.h)
// replace ATen composites on a CUDA device. On by default since their gpu tests passed on an H200
// (docs/gpus.md, "Fused kernels"); SEGTRAIN_FUSED_KERNELS=0 keeps the composites. A kernel no GPU
// has run yet (the linears' bias gradients, kernels/linear.h; the residual add fused with the
// norm after it, kernels/residual_norm.h) is taken only with
// SEGTRAIN_FUSED_KERNELS=all, until its gpu tests pass on a GPU. The CPU always computes the
// composites.
#include <c10/core/ScalarType.h>

#include <string>

namespace segtrain::kernels {

enum class FusedKernels {
  off,  // ATen's composites everywhere
  on,   // the kernels whose gpu tests have passed on a GPU (the default)
  all,  // those and the kernels no GPU has run yet
};

// The value of SEGTRAIN_FUSED_KERNELS (nullptr: unset): unset, empty or 1 on, 0 off, all all;
// any other value is an InputError naming the variable and what it takes.
FusedKernels fused_kernels_switch(const char* value);

// The switch as this process's environment sets it, read once (the trainer's plan line
// reads it first, so a bad value stops the run before its first step).
FusedKernels fused_kernels_level();
// Whether the switch takes the GPU-tested kernels (on or all).
bool fused_kernels_requested();
// Whether it also takes the kernels no GPU has run yet (all).
bool untested_kernels_requested();

// fp32, bf16 or fp16: the floating dtypes the project's kernels (and ATen's fused ops beside them) take.
inline bool kernel_dtype(c10::ScalarType t) { return t == c10::kFloat || t == c10::kBFloat16 || t == c10::kHalf; }

// Whether this build has the CUDA kernels (a CUDA LibTorch).
bool fused_kernels_built();

// The plan line's words for the switch on a run's device ("" where it says nothing: the CPU,
// unless SEGTRAIN_FUSED_KERNELS=1 or all was set).
std::string describe_fused_kernels(bool cuda_device);

}  // namespace segtrain::kernels
