// truncate: the first L_t tokens of the window; positions 0..L_t-1 (Karypis et al. 2024, 3.3).
#include "data/sampler_kind.h"
#include "data/samplers/draw_helpers.h"

namespace segtrain::data {

extern const SamplerKind kTruncateSampler{
    .name = "truncate",
    .summary = "the first L_t tokens of the window, positions 0..L_t-1",
    .within_train_length = true,
    .compared_with = {},
    .draw = [](const DrawSetting& s, Rng&, const SampleOut& out) {
      iota_from(out.offsets, s.length, 0);
      positions_are_offsets(s.length, out.offsets, out.positions, out.loss_mask);
    }};

}  // namespace segtrain::data
