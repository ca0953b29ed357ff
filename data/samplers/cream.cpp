// cream (CREAM, Wu et al. 2024): from the L_e window, an L_t sample of a head at positions
// [0, h), a middle of L_t - 2h contiguous tokens and a tail ending at L_e, every token at its
// own position. Half the samples keep head and tail short (h = 4 L_e/L_t, "continuity"), half
// make the three segments equal thirds (h = L_t // 3, "relativity"); the middle's reach is
// drawn from a Gaussian over [L_t, L_e] (mean (1 + L_e/L_t)/2 L_t, data.sampler.sigma in units
// of L_t/2, the reference's 3 by default, clamped at the ends as the reference's table does),
// so the middle of the extended window is trained most: CREAM's answer to lost-in-the-middle.
// The loss covers every prediction, the jumps between segments included (the reference's
// labels = input_ids). Differences from the reference, which this file makes on purpose: the
// head/tail choice is drawn per sample (the reference draws it once per datasets.map batch of
// 3,000 documents), and samples are drawn anew every epoch from the window (the reference maps
// each document to one sample once); its rule for given draws is the reference's (tested).
#include "data/samplers/cream.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "common/numbers.h"
#include "data/rng.h"
#include "data/sampler_kind.h"
#include "data/samplers/draw_helpers.h"

namespace segtrain::data {

namespace {

constexpr int64_t kTablePoints = 1000;  // train.py:210: np.linspace(2, factor*2, 1000)

// The reference's inverse-CDF table (train.py:209-211): x = linspace(2, 2 factor, 1000) with
// numpy's arithmetic (i * step + start, the last point exactly 2 factor), cdf = Phi((x - mu) /
// sigma) with mu = 1 + factor.
struct CdfTable {
  int64_t factor = 0;
  double sigma = 0;
  std::vector<double> x, cdf;
};

const CdfTable& cdf_table(int64_t factor, double sigma) {
  thread_local CdfTable table;  // one per sampler thread: every sample of a run shares its shape
  if (table.factor == factor && table.sigma == sigma) return table;
  table.factor = factor;
  table.sigma = sigma;
  table.x.assign(kTablePoints, 0.0);
  table.cdf.assign(kTablePoints, 0.0);
  const double start = 2.0, stop = 2.0 * static_cast<double>(factor);
  const double step = (stop - start) / static_cast<double>(kTablePoints - 1);
  for (int64_t i = 0; i < kTablePoints; ++i) table.x[i] = static_cast<double>(i) * step + start;
  table.x[kTablePoints - 1] = stop;
  const double mu = 1.0 + static_cast<double>(factor);
  for (int64_t i = 0; i < kTablePoints; ++i)
    table.cdf[i] = 0.5 * (1.0 + std::erf((table.x[i] - mu) / (sigma * std::sqrt(2.0))));
  return table;
}

// np.interp(u, cdf, x) for a scalar: clamped to x's ends outside the table, else linear
// between the last table point <= u and the next (numpy's arr_interp).
double interp(double u, const std::vector<double>& xp, const std::vector<double>& fp) {
  if (u < xp.front()) return fp.front();
  if (u > xp.back()) return fp.back();
  const auto j = static_cast<size_t>(std::upper_bound(xp.begin(), xp.end(), u) - xp.begin()) - 1;
  if (j >= xp.size() - 1) return fp.back();
  if (xp[j] == u) return fp[j];
  const double slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j]);
  return slope * (u - xp[j]) + fp[j];
}

void cream_rules(const DataConfig& c, std::vector<ConfigProblem>& out) {
  const int64_t lt = c.train_length, le = c.extended_length;
  if (!(c.sampler.sigma > 0) || !std::isfinite(c.sampler.sigma))
    out.push_back({"data.sampler.sigma", format_double(c.sampler.sigma) +
                                             " is not a positive number: the spread of cream's Gaussian"});
  if (le % lt != 0 || le / lt < 2) {
    out.push_back({"data.extended_length", "cream needs L_e a multiple of L_t, at least 2 L_t (its tail ends at "
                                           "factor * L_t, factor = L_e / L_t); got L_e = " +
                                               std::to_string(le) + ", L_t = " + std::to_string(lt)});
    return;
  }
  if (lt % 2 != 0)
    out.push_back({"data.train_length", "cream needs an even L_t (the middle ends by rand_factor / 2 * L_t, "
                                        "rand_factor in 2..2 factor); got " + std::to_string(lt)});
  const int64_t factor = le / lt;
  if (lt - 8 * factor < 1)
    out.push_back({"data.train_length", "cream's continuity samples keep a head and a tail of 4 * L_e/L_t = " +
                                            std::to_string(4 * factor) + " tokens each and need a middle: L_t > " +
                                            std::to_string(8 * factor) + "; got " + std::to_string(lt)});
}

std::string cream_settings(const SamplerConfig& s) {
  std::ostringstream out;
  out << " sigma " << s.sigma;
  return out.str();
}

void cream_draw(const DrawSetting& setting, Rng& rng, const SampleOut& out) {
  CreamDraws draws;
  draws.rand_num = static_cast<int64_t>(rng.below(2));
  draws.uniform_random = rng.uniform();
  CreamLayout layout = cream_layout(setting.train_length, setting.extended_length, setting.sampler.sigma, draws);
  layout.end_id = layout.end_id_lo + static_cast<int64_t>(rng.below(static_cast<uint64_t>(
                                         layout.end_id_hi - layout.end_id_lo + 1)));
  cream_positions(layout, setting.train_length, out.offsets);
  positions_are_offsets(setting.length, out.offsets, out.positions, out.loss_mask);
}

}  // namespace

CreamLayout cream_layout(int64_t lt, int64_t le, double sigma, const CreamDraws& draws) {
  CreamLayout l;
  l.factor = le / lt;                                                   // train.py:196
  l.head_len = l.tail_len = draws.rand_num == 0 ? lt / 3 : 4 * l.factor;  // train.py:198-203
  l.len_chunk = lt - l.head_len - l.tail_len;                           // train.py:205
  const CdfTable& table = cdf_table(l.factor, sigma);
  l.rand_factor = static_cast<int64_t>(interp(draws.uniform_random, table.cdf, table.x));  // train.py:215-216
  // train.py:219: randint(int(head_len + (len_chunk-1)*(rand_factor/2)), (rand_factor/2)*L_t - tail_len - 1).
  const double half = static_cast<double>(l.rand_factor) / 2.0;
  l.end_id_lo = static_cast<int64_t>(static_cast<double>(l.head_len) + static_cast<double>(l.len_chunk - 1) * half);
  l.end_id_hi = static_cast<int64_t>(half * static_cast<double>(lt)) - l.tail_len - 1;
  l.end_id = l.end_id_lo + std::clamp<int64_t>(draws.end_id_offset, 0, l.end_id_hi - l.end_id_lo);
  return l;
}

void cream_positions(const CreamLayout& l, int64_t lt, int32_t* positions) {
  iota_from(positions, l.head_len, 0);                                            // train.py:206
  iota_from(positions + l.head_len, l.len_chunk, l.end_id - (l.len_chunk - 1));   // train.py:221
  iota_from(positions + l.head_len + l.len_chunk, l.tail_len, l.factor * lt - l.tail_len);  // train.py:207
}

extern const SamplerKind kCreamSampler{
    .name = "cream",
    .summary = "head, middle and tail segments at their own positions, the middle's reach drawn from a Gaussian "
               "(CREAM)",
    .takes_sigma = true,
    .baseline = true,
    .compared_with = "pose",
    .rules = cream_rules,
    .settings = cream_settings,
    .draw = cream_draw};

}  // namespace segtrain::data
