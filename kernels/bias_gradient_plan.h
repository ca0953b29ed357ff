#pragma once
// How the bias-gradient kernels (bias_gradient_cuda.cu) split a [rows, cols] gradient's column
// sums over the GPU, and so in what order they add: shared by the launch and the host test that
// replays that order (tests/models/linear_test.cpp). Deterministic: no atomics, a fixed order.
//
// A block of kColumnThreads x kRowThreads threads takes kColumnThreads packs of columns (a pack:
// 16 bytes, 8 bf16 or 4 fp32 columns, or 1 column where the rows are not 16-byte aligned) and one
// split of the rows. Thread (x, y) adds rows begin + y, begin + y + kRowThreads, ... of its pack's
// columns in that order in fp32; the block then adds its kRowThreads sums in the order of y into
// one partial sum a column and split; a second kernel adds a column's partials in split order and
// rounds once to the gradient's dtype.
#include <algorithm>
#include <cstdint>

namespace segtrain::kernels {

inline constexpr int kColumnThreads = 32;
inline constexpr int kRowThreads = 8;

struct ColumnSumPlan {
  int64_t rows = 0, cols = 0;
  int pack = 1;              // columns a thread reads at once
  int64_t column_tiles = 0;  // blocks across the columns (kColumnThreads packs each)
  int64_t splits = 0;        // blocks down the rows (the grid's y: at most 65,535)
  int64_t rows_per_split = 0;
};

// `element_bytes`: the gradient's element size; `aligned`: whether its data starts on a 16-byte
// boundary; `multiprocessors`: the device's. About 8 blocks a multiprocessor (its 2,048 threads
// resident), as long as each thread still adds at least 4 rows: enough loads in flight to keep a
// memory-bound pass near the bandwidth, and few partials to add afterwards.
inline ColumnSumPlan plan_column_sums(int64_t rows, int64_t cols, int64_t element_bytes, bool aligned,
                                      int64_t multiprocessors) {
  ColumnSumPlan plan;
  plan.rows = rows;
  plan.cols = cols;
  const int vector = static_cast<int>(16 / element_bytes);
  plan.pack = aligned && cols % vector == 0 ? vector : 1;
  const int64_t tile = int64_t{kColumnThreads} * plan.pack;
  plan.column_tiles = std::max<int64_t>(1, (cols + tile - 1) / tile);
  const int64_t wanted = (8 * std::max<int64_t>(1, multiprocessors) + plan.column_tiles - 1) / plan.column_tiles;
  const int64_t most = std::max<int64_t>(1, rows / (int64_t{kRowThreads} * 4));
  const int64_t splits = std::clamp<int64_t>(wanted, 1, std::min<int64_t>(most, 65535));
  plan.rows_per_split = std::max<int64_t>(1, (rows + splits - 1) / splits);
  plan.splits = std::max<int64_t>(1, (rows + plan.rows_per_split - 1) / plan.rows_per_split);  // none empty
  return plan;
}

}  // namespace segtrain::kernels
