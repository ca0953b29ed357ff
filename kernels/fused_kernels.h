#pragma once
// Whether the project's own CUDA kernels (kernels/) and ATen's fused paths (ATen's fused RMSNorm,
// LayerNorm in 16 bits outside autocast, ALiBi folded into q.k: models/modules/alibi_folded.h)
// replace ATen composites on a CUDA device. On by default since their gpu tests passed on an H200
// (docs/gpus.md, "Fused kernels"); SEGTRAIN_FUSED_KERNELS=0 keeps the composites. The CPU always
// computes the composites.
#include <string>

namespace segtrain::kernels {

// The value of SEGTRAIN_FUSED_KERNELS (nullptr: unset): unset, empty or 1 on, 0 off; any
// other value is an InputError naming the variable and what it takes.
bool fused_kernels_switch(const char* value);

// The switch as this process's environment sets it, read once (the trainer's plan line
// reads it first, so a bad value stops the run before its first step).
bool fused_kernels_requested();

// Whether this build has the CUDA kernels (a CUDA LibTorch).
bool fused_kernels_built();

// The plan line's words for the switch on a run's device ("" where it says nothing: the CPU,
// unless SEGTRAIN_FUSED_KERNELS=1 was set).
std::string describe_fused_kernels(bool cuda_device);

}  // namespace segtrain::kernels
