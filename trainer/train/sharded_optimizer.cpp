#include "trainer/train/sharded_optimizer.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <unordered_map>

#include "common/error.h"

namespace segtrain::trainer {

ShardedAdamW::ShardedAdamW(const std::vector<std::pair<std::string, at::Tensor>>& named_parameters,
                           AdamWOptions options, FlatBuckets& buckets, ProcessGroup& group)
    : options_(std::move(options)), buckets_(buckets), group_(group) {
  std::unordered_map<const void*, std::string> name_of;
  for (const auto& [name, p] : named_parameters) name_of[p.unsafeGetTensorImpl()] = name;
  for (const auto& p : buckets_.params()) {
    auto it = name_of.find(p.unsafeGetTensorImpl());
    TORCH_CHECK(it != name_of.end(), "ShardedAdamW: a bucketed parameter has no name");
    names_.push_back(it->second);
  }
  const int64_t rank = group_.rank(), world = group_.world_size();
  for (auto& b : buckets_.buckets()) {
    std::vector<Piece> pieces;
    Update decayed{options_.weight_decay, {}, {}, {}, {}, {}}, plain{0.0, {}, {}, {}, {}, {}};
    for (const FlatRange& range : b.owned(rank, world)) {
      for (size_t k = 0; k < b.members.size(); ++k) {
        const at::Tensor& p = buckets_.params()[b.members[k]];
        const int64_t first = std::max(range.begin, b.offsets[k]);
        const int64_t last = std::min(range.begin + range.numel, b.offsets[k] + p.numel());
        if (first >= last) continue;
        Piece piece;
        piece.param = b.members[k];
        piece.param_offset = first - b.offsets[k];
        piece.bucket_offset = first;
        piece.numel = last - first;
        piece.decayed = decays(options_, names_[piece.param], p);
        piece.exp_avg = at::zeros({piece.numel}, p.options());
        piece.exp_avg_sq = at::zeros({piece.numel}, p.options());
        piece.step = at::zeros({}, p.options().dtype(at::kFloat));  // the fused kernel's step count
        Update& u = piece.decayed ? decayed : plain;
        u.params.push_back(b.params.narrow(0, first, piece.numel));
        u.grads.push_back(b.grads.narrow(0, first, piece.numel));
        u.exp_avg.push_back(piece.exp_avg);
        u.exp_avg_sq.push_back(piece.exp_avg_sq);
        u.steps.push_back(piece.step);
        slice_grads_.push_back(u.grads.back());
        pieces.push_back(std::move(piece));
      }
    }
    std::vector<Update> updates;
    for (Update* u : {&decayed, &plain})
      if (!u->params.empty()) updates.push_back(std::move(*u));
    pieces_.push_back(std::move(pieces));
    updates_.push_back(std::move(updates));
  }
}

at::Tensor ShardedAdamW::grad_square_sum() {
  const auto& params = buckets_.params();
  return grad_square_sum_of(slice_grads_, params.empty() ? c10::Device(at::kCPU) : params.front().device());
}

void ShardedAdamW::scale_grads(double factor) {
  if (factor != 1.0 && !slice_grads_.empty()) at::_foreach_mul_(slice_grads_, factor);
}

void ShardedAdamW::step(double lr) {
  at::NoGradGuard no_grad;
  std::vector<std::unique_ptr<PendingCollective>> gathers;
  for (size_t b = 0; b < updates_.size(); ++b) {
    for (auto& u : updates_[b]) {
      at::_foreach_add_(u.steps, 1.0);  // the kernel expects the already-incremented step
      at::_fused_adamw_(u.params, u.grads, u.exp_avg, u.exp_avg_sq, /*max_exp_avg_sqs=*/{}, u.steps, lr,
                        options_.beta1, options_.beta2, u.weight_decay, options_.eps, /*amsgrad=*/false,
                        /*maximize=*/false);
    }
    const FlatBucket& bucket = buckets_.buckets()[b];
    for (const auto& segment : bucket.segments)
      gathers.push_back(group_.all_gather_async(bucket.params.narrow(0, segment.begin, segment.numel)));
  }
  for (auto& g : gathers) g->wait();
  ++steps_taken_;
}

void ShardedAdamW::zero_grad() { buckets_.zero_grad(); }

std::map<std::string, at::Tensor> ShardedAdamW::state_dict() {
  at::NoGradGuard no_grad;
  std::map<std::string, at::Tensor> state;
  const bool keeper = group_.rank() == 0;
  for (size_t b = 0; b < pieces_.size(); ++b) {
    const FlatBucket& bucket = buckets_.buckets()[b];
    for (const char* which : {"exp_avg.", "exp_avg_sq."}) {
      const bool first = std::string(which) == "exp_avg.";
      at::Tensor whole = at::zeros_like(bucket.params);
      for (const auto& piece : pieces_[b])
        whole.narrow(0, piece.bucket_offset, piece.numel).copy_(first ? piece.exp_avg : piece.exp_avg_sq);
      for (const auto& segment : bucket.segments)
        group_.all_gather_async(whole.narrow(0, segment.begin, segment.numel))->wait();
      if (!keeper) continue;
      for (size_t k = 0; k < bucket.members.size(); ++k) {
        const at::Tensor& p = buckets_.params()[bucket.members[k]];
        state[which + names_[bucket.members[k]]] =
            whole.narrow(0, bucket.offsets[k], p.numel()).view(p.sizes()).to(at::kCPU, /*non_blocking=*/false,
                                                                              /*copy=*/true);
      }
    }
  }
  if (keeper)
    for (const auto& name : names_) state["step." + name] = at::full({}, static_cast<double>(steps_taken_), at::kFloat);
  return state;
}

void ShardedAdamW::load_state_dict(const std::map<std::string, at::Tensor>& state) {
  auto fetch = [&](const std::string& key, const at::Tensor& param) { return state_entry(state, key, param.sizes()); };
  at::NoGradGuard no_grad;
  int64_t steps = -1;
  for (size_t i = 0; i < names_.size(); ++i) {  // every entry is checked, also those of other ranks' slices
    const at::Tensor& p = buckets_.params()[i];
    fetch("exp_avg." + names_[i], p), fetch("exp_avg_sq." + names_[i], p);
    auto it = state.find("step." + names_[i]);
    if (it == state.end() || it->second.numel() != 1)
      throw InputError("optimizer state has no scalar entry 'step." + names_[i] + "'");
    if (steps < 0) steps = static_cast<int64_t>(it->second.item<double>());
  }
  for (auto& pieces : pieces_)
    for (auto& piece : pieces) {
      const at::Tensor& p = buckets_.params()[piece.param];
      const std::string& name = names_[piece.param];
      piece.exp_avg.copy_(fetch("exp_avg." + name, p).reshape(-1).narrow(0, piece.param_offset, piece.numel));
      piece.exp_avg_sq.copy_(fetch("exp_avg_sq." + name, p).reshape(-1).narrow(0, piece.param_offset, piece.numel));
      piece.step.fill_(static_cast<double>(steps));
    }
  steps_taken_ = std::max<int64_t>(steps, 0);
}

int64_t ShardedAdamW::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& pieces : pieces_)
    for (const auto& piece : pieces)
      bytes += static_cast<int64_t>(piece.exp_avg.nbytes() + piece.exp_avg_sq.nbytes() + piece.step.nbytes());
  return bytes;
}

}  // namespace segtrain::trainer
