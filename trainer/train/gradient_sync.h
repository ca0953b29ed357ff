#pragma once
// Sums gradients over all ranks while backward is still running, the way DDP's
// reducer does, on the flat buckets of FlatBuckets (each .grad is a view into
// its bucket, so a collective runs in place on the bucket: no packing copies).
// Only on a step's last micro-batch (after arm()) a hook on each parameter
// notes when its gradient has been accumulated; as soon as all of a bucket's
// gradients are there, its collectives start (one a segment), buckets strictly
// in index order so every rank issues the same sequence. finish() then starts what backward
// left (buckets with a parameter that got no gradient this step) and waits.
//   all_reduce:     afterwards every .grad holds the sum over ranks.
//   reduce_scatter: afterwards only this rank's part of each segment holds the
//                   sum (ZeRO-1: the optimizer updates those alone); the rest
//                   of the buffer still holds this rank's own gradients.
// With a sink (bf16 parameters with fp32 master weights, sharded_optimizer.h),
// every micro-batch's gradients are reduced (arm() before each backward) and
// each reduced part is handed to the sink as soon as its collective lands:
// the optimizer adds it to its fp32 sum of the step's gradient, so small
// contributions are not lost to bf16 accumulation, and under reduce_scatter a
// rank keeps only its slice of that sum (ZeRO-2). The collectives run in
// `reduce_dtype`: a bf16 segment is summed in fp32 through a temporary fp32
// copy of the segment, at most 4 such copies in flight on any backend.
// Reentrant activation checkpointing accumulates gradients in a nested
// backward; the hooks fire there just the same. A gradient accumulated again
// after its bucket started (one parameter used in two checkpointed segments)
// would race with the collective: finish() refuses the step instead, as DDP
// does. Ranks must agree on which parameters get a gradient, as they do for
// one model.
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "trainer/train/distributed.h"
#include "trainer/train/flat_buckets.h"

namespace segtrain::trainer {

enum class Reduction { all_reduce, reduce_scatter };

// Receives a reduced part of bucket `bucket`: `range` of its buffers (this
// rank's slice of a segment under reduce_scatter, the whole segment under
// all_reduce), summed over ranks, in the reduce dtype.
using ReducedGradientSink = std::function<void(size_t bucket, FlatRange range, const at::Tensor& reduced)>;

struct GradientSyncOptions {
  Reduction reduction = Reduction::all_reduce;
  std::optional<at::ScalarType> reduce_dtype;  // nullopt: the gradients' own
  ReducedGradientSink sink;                    // empty: the sums stay in the buckets
};

class GradientSync {
 public:
  GradientSync(ProcessGroup& group, FlatBuckets& buckets, GradientSyncOptions options);
  ~GradientSync();  // removes the hooks
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  void arm();     // before the backward of the step's last micro-batch (of every one with a sink)
  void finish();  // after it: the sums are in place (see Reduction), or handed to the sink

  struct Stats {
    int64_t buckets = 0;
    int64_t started_in_backward = 0;  // in the last finish(); the rest were started by finish() itself
  };
  Stats stats() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace segtrain::trainer
