#include "data/sampler_rules.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "common/numbers.h"

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
  if (c.sampler.placement != ChunkPlacement::uniform && c.sampler.method != SamplerMethod::chunk)
    fail("data.sampler.placement", std::string(enum_name(kChunkPlacements, c.sampler.placement)) +
                                       " applies to data.sampler.method chunk only, not " +
                                       enum_name(kSamplerMethods, c.sampler.method) + "; use uniform or chunk");
  if (!out.empty() && out.front().key == "data.sampler.alpha") return out;  // the segment rules need a valid alpha
  const double segment = alpha * static_cast<double>(lt);
  switch (c.sampler.method) {
    case SamplerMethod::chunk:
      if (!is_integer(1.0 / alpha))
        fail("data.sampler.alpha", "chunk takes 1/alpha segments, but 1/" + format_double(alpha) + " = " +
                                       format_double(1.0 / alpha) + " is not an integer");
      else if (!is_integer(segment) || std::round(segment) < 1)
        fail("data.sampler.alpha", "chunk segments have alpha * train_length = " + format_double(segment) +
                                       " tokens; that must be an integer >= 1");
      break;
    case SamplerMethod::prefix: {
      if (!is_integer(segment) || std::round(segment) < 1) {
        fail("data.sampler.alpha", "prefix suffixes have alpha * train_length = " + format_double(segment) +
                                       " tokens; that must be an integer >= 1");
        break;
      }
      // The suffix starts at i with (1-alpha)L_t < i < L_e - alpha*L_t (Karypis et al. 2024, 3.3).
      const int64_t suffix = std::llround(segment);
      const int64_t prefix = lt - suffix;
      if (prefix + 1 > le - suffix - 1)
        fail("data.extended_length",
             "prefix needs an integer suffix start i with " + std::to_string(prefix) + " < i < " +
                 std::to_string(le - suffix) + " ((1-alpha)L_t < i < L_e - alpha*L_t); none exists for L_e = " +
                 std::to_string(le) + ", L_t = " + std::to_string(lt) + "; use L_e >= " +
                 (lt <= std::numeric_limits<int64_t>::max() - 2 ? std::to_string(lt + 2) : "L_t + 2") +
                 " or another sampler");
      break;
    }
    default: break;
  }
  return out;
}

}  // namespace segtrain::data
