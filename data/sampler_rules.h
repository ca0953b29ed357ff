#pragma once
// Every rule that ties the data section's sampler keys to each other and to L_t
// and L_e (Karypis et al. 2024, 3.3), in one place: the validator reports them at the config
// file's line, the experiment grid checks its method names (chunk-<alpha>, ...)
// through the same validation, and the Sampler refuses them as a last guard.
// Plain C++, so the config library calls it without LibTorch.
#include <vector>

#include "common/config_problem.h"
#include "data/config.h"

namespace segtrain::data {

// alpha in (0, 1) (chunk with alpha = 1 would be one run of L_t: a crop, not a
// segmentation; refused); L_e >= L_t and below 2^31 (int32 positions); a registered
// sampler; placement ring with chunk only; then the sampler's own rules (data/samplers/:
// chunk's 1/alpha whole segments of alpha * L_t >= 1 tokens, prefix's suffix and its start).
// Empty when the section holds together.
std::vector<ConfigProblem> sampler_problems(const DataConfig& c);

}  // namespace segtrain::data
