// prefix-α (Karypis et al. 2024, 3.3): the suffix, α·L_t contiguous tokens from i, with
// (1-α)L_t < i < L_e - α·L_t, i uniform; the prefix, (1-α)L_t distinct offsets drawn uniformly
// from [0, i), increasing; positions = offsets; the loss on the suffix only (the last prefix
// input's target, the first suffix token, is kept but masked like the whole prefix).
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "common/numbers.h"
#include "data/rng.h"
#include "data/sampler_kind.h"
#include "data/samplers/draw_helpers.h"

namespace segtrain::data {

namespace {

int64_t suffix_length(const SamplerConfig& s, int64_t train_length) {
  return std::llround(s.alpha * static_cast<double>(train_length));
}

void prefix_rules(const DataConfig& c, std::vector<ConfigProblem>& out) {
  const int64_t lt = c.train_length, le = c.extended_length;
  const double segment = c.sampler.alpha * static_cast<double>(lt);
  if (!is_integer(segment) || std::round(segment) < 1) {
    out.push_back({"data.sampler.alpha", "prefix suffixes have alpha * train_length = " + format_double(segment) +
                                             " tokens; that must be an integer >= 1"});
    return;
  }
  const int64_t suffix = std::llround(segment), prefix = lt - suffix;
  if (prefix + 1 > le - suffix - 1)
    out.push_back({"data.extended_length",
                   "prefix needs an integer suffix start i with " + std::to_string(prefix) + " < i < " +
                       std::to_string(le - suffix) + " ((1-alpha)L_t < i < L_e - alpha*L_t); none exists for L_e = " +
                       std::to_string(le) + ", L_t = " + std::to_string(lt) + "; use L_e >= " +
                       (lt <= std::numeric_limits<int64_t>::max() - 2 ? std::to_string(lt + 2) : "L_t + 2") +
                       " or another sampler"});
}

std::string prefix_settings(const SamplerConfig& s) {
  std::ostringstream out;
  out << " alpha " << s.alpha;
  return out.str();
}

void prefix_draw(const DrawSetting& setting, Rng& rng, const SampleOut& out) {
  const int64_t s = suffix_length(setting.sampler, setting.train_length), p = setting.train_length - s;
  const int64_t i = rng.between(p + 1, setting.extended_length - s - 1);
  sample_sorted_distinct(rng, i, p, out.offsets);
  iota_from(out.offsets + p, s, i);
  positions_are_offsets(setting.length, out.offsets, out.positions, out.loss_mask);
  std::fill(out.loss_mask, out.loss_mask + p, uint8_t{0});
}

}  // namespace

extern const SamplerKind kPrefixSampler{
    .name = "prefix",
    .summary = "(1-alpha)*L_t spread prefix tokens and a contiguous alpha*L_t suffix, the loss on the suffix",
    .named_with_alpha = true,
    .compared_with = {},
    .rules = prefix_rules,
    .settings = prefix_settings,
    .draw = prefix_draw};

}  // namespace segtrain::data
