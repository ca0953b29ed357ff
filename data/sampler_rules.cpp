#include "data/sampler_rules.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "common/numbers.h"
#include "common/strings.h"
#include "data/sampler_kind.h"

namespace segtrain::data {

std::vector<ConfigProblem> sampler_problems(const DataConfig& c) {
  std::vector<ConfigProblem> out;
  auto fail = [&](const char* key, std::string message) { out.push_back({key, std::move(message)}); };
  const int64_t lt = c.train_length, le = c.extended_length;
  const double alpha = c.sampler.alpha;
  if (!(alpha > 0 && alpha < 1))
    fail("data.sampler.alpha", format_double(alpha) + " is not in (0, 1): chunk cuts L_t into 1/alpha segments, "
                               "prefix trains on a suffix of alpha * L_t tokens");
  if (le < lt) {
    fail("data.extended_length", "L_e = " + std::to_string(le) + " is shorter than data.train_length L_t = " +
                                     std::to_string(lt) + "; it must be >= L_t");
    return out;  // the rules below assume L_e >= L_t
  }
  if (le > std::numeric_limits<int32_t>::max())
    fail("data.extended_length", "L_e = " + std::to_string(le) + " must be below 2^31 (positions are int32)");
  const SamplerKind* kind = find_sampler(c.sampler.method);
  if (!kind) {
    fail("data.sampler.method", "'" + c.sampler.method + "' is no sampler; expected one of " + join(sampler_names(), ", "));
    return out;
  }
  if (c.sampler.placement != ChunkPlacement::uniform && !kind->takes_placement)
    fail("data.sampler.placement", std::string(enum_name(kChunkPlacements, c.sampler.placement)) +
                                       " applies to data.sampler.method chunk only, not " + c.sampler.method +
                                       "; use uniform or chunk");
  if (c.sampler.sigma != SamplerConfig{}.sigma && !kind->takes_sigma)
    fail("data.sampler.sigma", "applies to data.sampler.method cream only, not " + c.sampler.method +
                                   "; remove it or use cream");
  if (!out.empty() && out.front().key == "data.sampler.alpha") return out;  // the segment rules need a valid alpha
  if (kind->rules) kind->rules(c, out);
  return out;
}

}  // namespace segtrain::data
