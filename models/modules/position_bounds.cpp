#include "models/modules/position_bounds.h"

#include <ATen/ATen.h>

namespace segtrain::models {

PositionBounds PositionBounds::of(const at::Tensor& positions) {
  if (positions.numel() == 0) return {};
  const auto [lowest, highest] = at::aminmax(positions);
  PositionBounds bounds;
  bounds.lowest = lowest.item<int64_t>();
  bounds.end = highest.item<int64_t>() + 1;
  bounds.rows_share_positions =
      positions.size(0) <= 1 || positions.eq(positions.slice(0, 0, 1)).all().item<bool>();
  return bounds;
}

}  // namespace segtrain::models
