#pragma once
// One evaluated window's loss kept by block (torch-free): what the experiment's
// intervals over windows and positions are computed from (trainer/experiment/intervals.h).
#include <cstdint>
#include <vector>

namespace segtrain::trainer {

// Predictions per block of a window's kept loss: small enough for bootstrap blocks of L/16
// at every length >= 2,048, large enough that a 32k window keeps 256 numbers.
inline constexpr int64_t kLossBlock = 128;

// Where the window is, and its summed loss per block of kLossBlock predictions
// (prediction i, of position i+1, is in block i / kLossBlock; the last block holds the
// rest of the window's L-1 predictions).
struct WindowLoss {
  int64_t doc = 0, start = 0;
  std::vector<double> block_nll;
};

}  // namespace segtrain::trainer
