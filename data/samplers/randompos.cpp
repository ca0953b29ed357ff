// randompos (RandomPos, Ruoss et al. 2023): L_t contiguous tokens from a uniform start in
// [0, L_e - L_t]; positions a sorted, distinct, uniform sample of [0, L_e).
#include "data/rng.h"
#include "data/sampler_kind.h"
#include "data/samplers/draw_helpers.h"

namespace segtrain::data {

extern const SamplerKind kRandomPosSampler{
    .name = "randompos",
    .summary = "L_t contiguous tokens, positions a sorted uniform sample of [0, L_e) (RandomPos)",
    .baseline = true,
    .compared_with = {},
    .draw = [](const DrawSetting& s, Rng& rng, const SampleOut& out) {
      iota_from(out.offsets, s.length, rng.between(0, s.extended_length - s.train_length));
      sample_sorted_distinct(rng, s.extended_length, s.train_length, out.positions);
      std::fill(out.loss_mask, out.loss_mask + s.length, uint8_t{1});
    }};

}  // namespace segtrain::data
