#pragma once
// The parameters of a data-parallel run (or of bf16 storage) packed into flat
// buckets, as DDP's gradient_as_bucket_view and ZeRO lay them out: each bucket is
// one flat buffer of parameter values and one of gradients, and every parameter's
// data and .grad become views into them. Collectives then run in place on whole buckets
// (no packing copies), and a rank's 1/N slice of a bucket is a plain narrow().
//
// Parameters go into buckets of about `bucket_bytes` in reverse registration
// order, roughly the order backward produces their gradients; a parameter
// larger than that has a bucket of its own. Each bucket is padded with zeros
// to a multiple of the world size and cut into segments of at most about
// `bucket_bytes` (each a multiple of the world size): the unit of every
// collective, so no collective, and no buffer a backend allocates for one
// (Gloo's), is larger than that, even for a 32k x 4096 embedding. Rank r owns
// the r-th of the N equal parts of every segment. Gradients stay allocated
// between steps and are zeroed, not freed. One process with fp32 master weights
// has no gradient buffers (gradient_buffers false): its optimizer takes each
// gradient as backward leaves it (ShardedAdamWSetup::sums_in_backward).
#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace segtrain::trainer {

// A contiguous range [begin, begin + numel) of a bucket's buffers.
struct FlatRange {
  int64_t begin = 0, numel = 0;
};

struct FlatBucket {
  std::vector<size_t> members;   // parameter indices, in the order they are packed
  std::vector<int64_t> offsets;  // where each member starts in the buffers
  int64_t numel = 0;             // the members' elements; the rest is padding
  at::Tensor params, grads;      // flat, [padded]; grads undefined without gradient buffers
  std::vector<FlatRange> segments;  // cover the buffers in order; each numel divides by the world size

  // This rank's part of each segment, in order.
  std::vector<FlatRange> owned(int64_t rank, int64_t world_size) const;
};

class FlatBuckets {
 public:
  // Takes the parameters that require a gradient; all of a bucket's share one
  // dtype and device (a change starts a new bucket). `storage` (bf16 storage
  // with fp32 master weights elsewhere): the buffers hold that dtype and the
  // parameters become views of it, their values rounded. `gradient_buffers`
  // false: no gradient buffers, the parameters' .grad left alone.
  FlatBuckets(const std::vector<at::Tensor>& params, int64_t bucket_bytes, int64_t world_size,
              std::optional<at::ScalarType> storage = std::nullopt, bool gradient_buffers = true);

  const std::vector<at::Tensor>& params() const { return params_; }
  std::vector<FlatBucket>& buckets() { return buckets_; }
  const std::vector<FlatBucket>& buckets() const { return buckets_; }
  size_t bucket_of(size_t param) const { return bucket_of_[param]; }
  int64_t world_size() const { return world_size_; }

  bool has_gradient_buffers() const { return gradient_buffers_; }
  void zero_grad();  // every gradient (and the padding) to 0, in place; nothing without gradient buffers

 private:
  std::vector<at::Tensor> params_;
  std::vector<FlatBucket> buckets_;
  std::vector<size_t> bucket_of_;
  int64_t world_size_;
  bool gradient_buffers_;
};

}  // namespace segtrain::trainer
