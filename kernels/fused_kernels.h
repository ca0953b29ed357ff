#pragma once
// Whether the project's own CUDA kernels (kernels/) and the fused paths that have not yet
// run on a GPU (ATen's fused RMSNorm, LayerNorm in 16 bits outside autocast, ALiBi folded into
// q.k: models/modules/alibi_folded.h)
// replace ATen composites on a CUDA device. Off unless SEGTRAIN_FUSED_KERNELS=1 until a GPU
// session has run their tests (docs/gpus.md, "Fused kernels"): they are compiled in every
// CUDA build. The CPU always computes the composites.
#include <string>

namespace segtrain::kernels {

// The value of SEGTRAIN_FUSED_KERNELS (nullptr: unset): unset, empty or 0 off, 1 on; any
// other value is an InputError naming the variable and what it takes.
bool fused_kernels_switch(const char* value);

// The switch as this process's environment sets it, read once (the trainer's plan line
// reads it first, so a bad value stops the run before its first step).
bool fused_kernels_requested();

// Whether this build has the CUDA kernels (a CUDA LibTorch).
bool fused_kernels_built();

// The plan line's words for the switch on a run's device ("" when off).
std::string describe_fused_kernels(bool cuda_device);

}  // namespace segtrain::kernels
