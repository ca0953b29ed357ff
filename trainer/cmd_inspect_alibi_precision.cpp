// How many distinct ALiBi bias values each bucket of positions keeps in fp32,
// fp16 and bf16 (seed 002, Table 2). The bias is computed as BLOOM does (fp32
// slope times position) and then cast, which is what a 16-bit model would see.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <iostream>

#include "models/positions.h"
#include "trainer/commands.h"

namespace segtrain::trainer {

int cmd_inspect_alibi_precision(const InspectAlibiPrecisionOptions& o) {
  const auto slopes = models::alibi_slopes(o.heads);
  const auto positions = at::arange(o.length, at::kLong);
  nlohmann::json heads = nlohmann::json::array();
  for (int64_t h = 0; h < o.heads; ++h) {
    if (o.head && *o.head != h) continue;
    const auto bias = slopes[h] * positions;  // fp32
    nlohmann::json buckets = nlohmann::json::array();
    for (int64_t start = 0; start < o.length; start += o.bucket) {
      const int64_t end = std::min(start + o.bucket, o.length);
      const auto part = bias.slice(0, start, end);
      auto distinct = [&](at::ScalarType t) { return std::get<0>(at::_unique(part.to(t))).numel(); };
      buckets.push_back({{"start", start}, {"end", end}, {"fp32", distinct(at::kFloat)},
                         {"fp16", distinct(at::kHalf)}, {"bf16", distinct(at::kBFloat16)}});
    }
    heads.push_back({{"head", h}, {"slope", slopes[h].item<double>()}, {"buckets", buckets}});
  }
  nlohmann::json out = {{"heads", o.heads}, {"length", o.length}, {"bucket", o.bucket}, {"per_head", heads}};
  std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace segtrain::trainer
