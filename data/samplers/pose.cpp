// pose (PoSE, Zhu et al. 2023, two chunks): L_t contiguous tokens from a uniform start in
// [0, L_e - L_t]; split point l uniform in [1, L_t - 1], skip u uniform in [0, L_e - L_t];
// positions j for j < l and j + u after.
#include <algorithm>

#include "data/rng.h"
#include "data/sampler_kind.h"
#include "data/samplers/draw_helpers.h"

namespace segtrain::data {

extern const SamplerKind kPoseSampler{
    .name = "pose",
    .summary = "L_t contiguous tokens in two chunks, the second's positions skipped ahead (PoSE)",
    .baseline = true,
    .compared_with = {},
    .draw = [](const DrawSetting& s, Rng& rng, const SampleOut& out) {
      const int64_t lt = s.train_length;
      iota_from(out.offsets, s.length, rng.between(0, s.extended_length - lt));
      const int64_t split = lt > 1 ? rng.between(1, lt - 1) : 1;
      const int64_t skip = rng.between(0, s.extended_length - lt);
      for (int64_t j = 0; j < s.length; ++j) out.positions[j] = static_cast<int32_t>(j < split ? j : j + skip);
      std::fill(out.loss_mask, out.loss_mask + s.length, uint8_t{1});
    }};

}  // namespace segtrain::data
