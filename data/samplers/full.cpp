// full: the whole L_e window; positions 0..L_e-1 (Karypis et al. 2024, 3.3).
#include "data/sampler_kind.h"
#include "data/samplers/draw_helpers.h"

namespace segtrain::data {

extern const SamplerKind kFullSampler{
    .name = "full",
    .summary = "the whole L_e window, positions 0..L_e-1",
    .whole_window = true,
    .baseline = true,
    .compared_with = {},
    .draw = [](const DrawSetting& s, Rng&, const SampleOut& out) {
      iota_from(out.offsets, s.length, 0);
      positions_are_offsets(s.length, out.offsets, out.positions, out.loss_mask);
    }};

}  // namespace segtrain::data
