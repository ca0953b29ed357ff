#include "trainer/train/flat_buckets.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>

namespace segtrain::trainer {

FlatBuckets::FlatBuckets(const std::vector<at::Tensor>& params, int64_t bucket_bytes, int64_t world_size,
                         std::optional<at::ScalarType> storage, bool gradient_buffers)
    : world_size_(world_size), gradient_buffers_(gradient_buffers) {
  for (const auto& p : params)
    if (p.requires_grad()) params_.push_back(p);
  bucket_of_.resize(params_.size());
  int64_t bytes = 0;
  for (size_t i = params_.size(); i-- > 0;) {
    const at::Tensor& p = params_[i];
    const int64_t nbytes = p.numel() * static_cast<int64_t>(storage ? c10::elementSize(*storage) : p.element_size());
    const bool new_bucket = buckets_.empty() || (bytes > 0 && bytes + nbytes > bucket_bytes) ||
                            params_[buckets_.back().members.front()].options().dtype() != p.options().dtype() ||
                            params_[buckets_.back().members.front()].device() != p.device();
    if (new_bucket) buckets_.emplace_back(), bytes = 0;
    FlatBucket& b = buckets_.back();
    b.members.push_back(i);
    b.offsets.push_back(b.numel);
    b.numel += p.numel();
    bytes += nbytes;
    bucket_of_[i] = buckets_.size() - 1;
  }
  at::NoGradGuard no_grad;
  for (auto& b : buckets_) {
    const at::TensorOptions options =
        storage ? params_[b.members.front()].options().dtype(*storage) : params_[b.members.front()].options();
    const int64_t padded = (b.numel + world_size_ - 1) / world_size_ * world_size_;
    const int64_t element = static_cast<int64_t>(c10::elementSize(c10::typeMetaToScalarType(options.dtype())));
    const int64_t per_segment = std::max<int64_t>(1, bucket_bytes / element / world_size_) * world_size_;
    for (int64_t begin = 0; begin < padded; begin += per_segment)
      b.segments.push_back({begin, std::min(per_segment, padded - begin)});
    b.params = at::zeros({padded}, options);
    if (gradient_buffers_) b.grads = at::zeros({padded}, options);
    for (size_t k = 0; k < b.members.size(); ++k) {
      at::Tensor p = params_[b.members[k]];
      at::Tensor values = b.params.narrow(0, b.offsets[k], p.numel()).view(p.sizes());
      values.copy_(p);
      p.set_data(values);
      if (gradient_buffers_) p.mutable_grad() = b.grads.narrow(0, b.offsets[k], p.numel()).view(p.sizes());
    }
  }
}

std::vector<FlatRange> FlatBucket::owned(int64_t rank, int64_t world_size) const {
  std::vector<FlatRange> out;
  for (const auto& segment : segments) {
    const int64_t part = segment.numel / world_size;
    out.push_back({segment.begin + rank * part, part});
  }
  return out;
}

void FlatBuckets::zero_grad() {
  if (gradient_buffers_)
    for (auto& b : buckets_) b.grads.zero_();
}

}  // namespace segtrain::trainer
