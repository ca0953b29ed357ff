#pragma once
// What the model needs to know about a batch's position ids before it runs: the
// smallest and largest id (the learned table's range check, the sequence length of
// the dynamic methods) and whether every row holds the same ids (ALiBi then builds
// one bias for all rows). On a CUDA device reading these from the positions tensor
// would drain the GPU queue at every forward, so the caller computes them from the
// host batch before the copy to the device and passes them along.
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace segtrain::models {

struct PositionBounds {
  int64_t lowest = 0;                // smallest position id
  int64_t end = 0;                   // largest position id + 1
  bool rows_share_positions = true;  // every row of [B, T] holds the same ids

  // Reads the ids of positions [B, T]. Call it on the host tensor: on a device
  // tensor it copies the results back, a synchronisation with the device. No ids
  // (T = 0) give {0, 0, true}.
  static PositionBounds of(const at::Tensor& positions);
};

}  // namespace segtrain::models
