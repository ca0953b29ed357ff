#include "trainer/train/sharded_optimizer.h"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <memory>
#include <unordered_map>

#include "common/error.h"

namespace segtrain::trainer {

namespace {

// Runs after autograd's AccumulateGrad has put a parameter's gradient into .grad: with .grad
// undefined before, it is backward's own tensor, stolen, not copied. Summed, then dropped at once.
struct SumIntoOptimizer : torch::autograd::PostAccumulateGradHook {
  SumIntoOptimizer(ShardedAdamW& optimizer, size_t param) : optimizer(optimizer), param(param) {}
  void operator()(const torch::autograd::Variable& parameter) override {
    at::Tensor& grad = parameter.mutable_grad();
    if (!grad.defined()) return;  // AccumulateGrad calls its hook for an undefined gradient too
    optimizer.sum_gradient(param, grad);
    grad.reset();
  }
  ShardedAdamW& optimizer;
  size_t param;
};

}  // namespace

ShardedAdamW::ShardedAdamW(const std::vector<std::pair<std::string, at::Tensor>>& named_parameters,
                           AdamWOptions options, FlatBuckets& buckets, ShardedAdamWSetup setup)
    : options_(std::move(options)),
      buckets_(buckets),
      group_(setup.group),
      sharded_(setup.group && setup.shard && setup.group->world_size() > 1),
      master_(!setup.master_from.empty()),
      sums_in_backward_(setup.sums_in_backward) {
  TORCH_CHECK(!sums_in_backward_ || (master_ && !setup.group && !buckets.has_gradient_buffers()),
              "ShardedAdamW: sums_in_backward takes one process with master weights over buckets without gradients");
  TORCH_CHECK(sums_in_backward_ || buckets.has_gradient_buffers(), "ShardedAdamW: the buckets have no gradients");
  std::unordered_map<const void*, std::string> name_of;
  for (const auto& [name, p] : named_parameters) name_of[p.unsafeGetTensorImpl()] = name;
  for (const auto& p : buckets_.params()) {
    auto it = name_of.find(p.unsafeGetTensorImpl());
    TORCH_CHECK(it != name_of.end(), "ShardedAdamW: a bucketed parameter has no name");
    names_.push_back(it->second);
  }
  at::NoGradGuard no_grad;
  for (auto& b : buckets_.buckets()) {
    std::vector<Piece> pieces;
    std::vector<Span> spans;
    Update decayed{options_.weight_decay, {}, {}, {}, {}, {}}, plain{0.0, {}, {}, {}, {}, {}};
    const auto ranges = sharded_ ? b.owned(group_->rank(), group_->world_size()) : b.segments;
    for (const FlatRange& range : ranges) {
      if (master_) {
        const auto fp32 = b.params.options().dtype(at::kFloat);
        spans.push_back({range, at::zeros({range.numel}, fp32), at::zeros({range.numel}, fp32), false});
      }
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
        const auto fp32 = p.options().dtype(at::kFloat);
        piece.exp_avg = at::zeros({piece.numel}, fp32);
        piece.exp_avg_sq = at::zeros({piece.numel}, fp32);
        piece.step = at::zeros({}, fp32);  // the fused kernel's step count
        Update& u = piece.decayed ? decayed : plain;
        if (master_) {
          auto source = setup.master_from.find(names_[piece.param]);
          TORCH_CHECK(source != setup.master_from.end(), "ShardedAdamW: no fp32 value for ", names_[piece.param]);
          const Span& span = spans.back();
          piece.master = span.master.narrow(0, first - range.begin, piece.numel);
          piece.master.copy_(source->second.reshape(-1).narrow(0, piece.param_offset, piece.numel));
          piece.grad_sum = span.grad_sum.narrow(0, first - range.begin, piece.numel);
          u.params.push_back(piece.master);
          u.grads.push_back(piece.grad_sum);
        } else {
          u.params.push_back(b.params.narrow(0, first, piece.numel));
          u.grads.push_back(b.grads.narrow(0, first, piece.numel));
        }
        u.exp_avg.push_back(piece.exp_avg);
        u.exp_avg_sq.push_back(piece.exp_avg_sq);
        u.steps.push_back(piece.step);
        update_grads_.push_back(u.grads.back());
        pieces.push_back(std::move(piece));
      }
    }
    std::vector<Update> updates;
    for (Update* u : {&decayed, &plain})
      if (!u->params.empty()) updates.push_back(std::move(*u));
    pieces_.push_back(std::move(pieces));
    updates_.push_back(std::move(updates));
    spans_.push_back(std::move(spans));
  }
  // Unsharded, no gather waits on a bucket's update: one call a decay group over every bucket, not one a
  // bucket and group (GPT-2 medium in distributed.bucket_mb's 4 MiB buckets: the H200 profile counted 173
  // optimizer launches a step, 5.4 ms, where the eager loop's two groups took 2.9 ms).
  if (!sharded_)
    for (const auto& updates : updates_)
      for (const Update& u : updates) {
        // One kernel call takes one device and dtype (a bucket's; all of one process's today).
        auto same = std::find_if(merged_updates_.begin(), merged_updates_.end(), [&](const Update& m) {
          const at::Tensor &a = m.params.front(), &b = u.params.front();
          return m.weight_decay == u.weight_decay && a.device() == b.device() && a.scalar_type() == b.scalar_type();
        });
        if (same == merged_updates_.end())
          same = merged_updates_.insert(merged_updates_.end(), {u.weight_decay, {}, {}, {}, {}, {}});
        for (auto [to, from] : {std::pair{&same->params, &u.params}, {&same->grads, &u.grads},
                                {&same->exp_avg, &u.exp_avg}, {&same->exp_avg_sq, &u.exp_avg_sq},
                                {&same->steps, &u.steps}})
          to->insert(to->end(), from->begin(), from->end());
      }
  // On the device of what the kernel updates (the master weights' with bf16 parameters).
  for (const auto& updates : updates_)
    if (!updates.empty()) {
      scalars_ = FusedStepScalars(updates.front().params.front().device());
      break;
    }
  if (sums_in_backward_) install_gradient_hooks();  // last: nothing after it may throw with the hooks pointing here
}

void ShardedAdamW::install_gradient_hooks() {
  pieces_of_.resize(buckets_.params().size());
  for (auto& pieces : pieces_)
    for (Piece& piece : pieces) pieces_of_[piece.param].push_back(&piece);
  for (const auto& p : buckets_.params())
    TORCH_CHECK(!torch::autograd::impl::post_acc_grad_hooks(p), "ShardedAdamW: a parameter already has a hook");
  for (size_t i = 0; i < buckets_.params().size(); ++i)
    torch::autograd::impl::set_post_acc_grad_hooks(buckets_.params()[i], std::make_unique<SumIntoOptimizer>(*this, i));
}

ShardedAdamW::~ShardedAdamW() {
  if (sums_in_backward_)
    for (const auto& p : buckets_.params()) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

at::Tensor ShardedAdamW::grad_square_sum() {
  settle_sums();
  const auto& params = buckets_.params();
  return grad_square_sum_of(update_grads_, params.empty() ? c10::Device(at::kCPU) : params.front().device());
}

void ShardedAdamW::accumulate(size_t bucket, FlatRange range, const at::Tensor& reduced) {
  at::NoGradGuard no_grad;
  for (Span& span : spans_[bucket]) {
    const int64_t first = std::max(range.begin, span.range.begin);
    const int64_t last = std::min(range.begin + range.numel, span.range.begin + span.range.numel);
    if (first >= last) continue;
    const at::Tensor from = reduced.narrow(0, first - range.begin, last - first);
    if (!span.summed && first == span.range.begin && last - first == span.range.numel) {
      span.grad_sum.copy_(from);  // the step's first sum of the whole range
    } else {
      if (!span.summed) span.grad_sum.zero_();
      span.grad_sum.narrow(0, first - span.range.begin, last - first).add_(from);
    }
    span.summed = true;
  }
}

void ShardedAdamW::sum_gradient(size_t param, const at::Tensor& grad) {
  at::NoGradGuard no_grad;
  const at::Tensor flat = grad.reshape(-1);
  for (Piece* piece : pieces_of_[param]) {
    const at::Tensor from = flat.narrow(0, piece->param_offset, piece->numel);
    if (piece->summed) piece->grad_sum.add_(from);
    else piece->grad_sum.copy_(from);  // the step's first sum of the piece
    piece->summed = true;
  }
}

void ShardedAdamW::settle_sums() {
  if (sums_in_backward_) {
    for (auto& pieces : pieces_)
      for (Piece& piece : pieces)
        if (!piece.summed) {
          piece.grad_sum.zero_();
          piece.summed = true;
        }
    return;
  }
  for (auto& spans : spans_)
    for (Span& span : spans)
      if (!span.summed) {
        span.grad_sum.zero_();
        span.summed = true;
      }
}

void ShardedAdamW::accumulate_local() {
  if (sums_in_backward_) return;
  for (size_t b = 0; b < pieces_.size(); ++b) {
    const FlatBucket& bucket = buckets_.buckets()[b];
    accumulate(b, {0, bucket.grads.numel()}, bucket.grads);
  }
}

void ShardedAdamW::apply(Update& u) {
  at::_foreach_add_(u.steps, 1.0);  // the kernel expects the already-incremented step
  at::_fused_adamw_(u.params, u.grads, u.exp_avg, u.exp_avg_sq, /*max_exp_avg_sqs=*/{}, u.steps, scalars_.lr,
                    options_.beta1, options_.beta2, u.weight_decay, options_.eps, /*amsgrad=*/false,
                    /*maximize=*/false, scalars_.grad_scale, /*found_inf=*/std::nullopt);
}

void ShardedAdamW::update() {
  at::NoGradGuard no_grad;
  settle_sums();
  for (auto& u : merged_updates_) apply(u);  // unsharded: every bucket at once
  std::vector<std::unique_ptr<PendingCollective>> gathers;
  for (size_t b = 0; b < updates_.size(); ++b) {
    if (sharded_)
      for (auto& u : updates_[b]) apply(u);
    const FlatBucket& bucket = buckets_.buckets()[b];
    if (master_)  // the bf16 parameters: the updated master, rounded (the padding's 0 stays 0)
      for (const Span& span : spans_[b]) bucket.params.narrow(0, span.range.begin, span.range.numel).copy_(span.master);
    if (sharded_)
      for (const auto& segment : bucket.segments)
        gathers.push_back(group_->all_gather_async(bucket.params.narrow(0, segment.begin, segment.numel)));
  }
  for (auto& g : gathers) g->wait();
}

void ShardedAdamW::zero_grad() {
  buckets_.zero_grad();
  for (auto& spans : spans_)
    for (Span& span : spans) {
      if (sums_in_place_) span.grad_sum.zero_();
      span.summed = sums_in_place_;  // else the next sum overwrites them (accumulate)
    }
  for (auto& pieces : pieces_)
    for (Piece& piece : pieces) piece.summed = sums_in_place_;  // sums_in_backward's (zeroed with their span)
  // A backward cut short (a pass out of memory, trainer_batch_size.cpp) can leave a gradient its hook
  // did not take: the next backward would add to it and sum it twice.
  if (sums_in_backward_)
    for (const auto& p : buckets_.params())
      if (p.grad().defined()) p.mutable_grad().reset();
}

// Every parameter's gradient is a view of its bucket, kept, or (sums_in_backward) summed and dropped:
// none is without one (without_gradient's default).
void ShardedAdamW::keep_gradients() {
  sums_in_place_ = true;  // this step's sums are whole (called after its backward): zero_grad zeroes them
}

at::Tensor ShardedAdamW::gather_whole(size_t b, at::Tensor Piece::*which) {
  const FlatBucket& bucket = buckets_.buckets()[b];
  at::Tensor whole = at::zeros({bucket.params.numel()}, bucket.params.options().dtype(at::kFloat));
  for (const auto& piece : pieces_[b]) whole.narrow(0, piece.bucket_offset, piece.numel).copy_(piece.*which);
  if (sharded_)
    for (const auto& segment : bucket.segments)
      group_->all_gather_async(whole.narrow(0, segment.begin, segment.numel))->wait();
  return whole;
}

std::vector<StatePiece> ShardedAdamW::state_pieces() {
  std::vector<StatePiece> out;
  for (const auto& pieces : pieces_)
    for (const auto& piece : pieces) out.push_back({names_[piece.param], piece.param_offset, piece.exp_avg, piece.exp_avg_sq});
  return out;
}

std::map<std::string, at::Tensor> ShardedAdamW::master_weights() {
  std::map<std::string, at::Tensor> weights;
  if (!master_) return weights;
  at::NoGradGuard no_grad;
  const bool keeper = !group_ || group_->rank() == 0;
  for (size_t b = 0; b < pieces_.size(); ++b) {
    const FlatBucket& bucket = buckets_.buckets()[b];
    const at::Tensor whole = gather_whole(b, &Piece::master);
    if (!keeper) continue;
    for (size_t k = 0; k < bucket.members.size(); ++k) {
      const at::Tensor& p = buckets_.params()[bucket.members[k]];
      weights[names_[bucket.members[k]]] =
          whole.narrow(0, bucket.offsets[k], p.numel()).view(p.sizes()).to(at::kCPU, false, /*copy=*/true);
    }
  }
  return weights;
}

void ShardedAdamW::load_master_weights(const std::map<std::string, at::Tensor>& weights) {
  if (!master_) return;
  at::NoGradGuard no_grad;
  for (auto& pieces : pieces_)
    for (auto& piece : pieces) {
      const at::Tensor& p = buckets_.params()[piece.param];
      const at::Tensor& value = state_entry(weights, names_[piece.param], p.sizes());
      piece.master.copy_(value.reshape(-1).narrow(0, piece.param_offset, piece.numel));
    }
}

void ShardedAdamW::load_state(const SavedOptimizerState& saved) {
  at::NoGradGuard no_grad;
  // Every parameter, also those of other ranks' slices: all ranks refuse a bad checkpoint alike.
  for (size_t i = 0; i < names_.size(); ++i) saved.check_covers(names_[i], buckets_.params()[i].numel());
  for (auto& pieces : pieces_)
    for (auto& piece : pieces) {
      const std::string& name = names_[piece.param];
      const int64_t numel = buckets_.params()[piece.param].numel();
      piece.exp_avg.copy_(saved.read("exp_avg", name, numel, piece.param_offset, piece.numel));
      piece.exp_avg_sq.copy_(saved.read("exp_avg_sq", name, numel, piece.param_offset, piece.numel));
      piece.step.fill_(static_cast<double>(saved.steps()));
    }
  steps_taken_ = saved.steps();
}

int64_t ShardedAdamW::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& pieces : pieces_)
    for (const auto& piece : pieces)
      for (const at::Tensor* t : {&piece.exp_avg, &piece.exp_avg_sq, &piece.step, &piece.master, &piece.grad_sum})
        if (t->defined()) bytes += static_cast<int64_t>(t->nbytes());
  return bytes;
}

}  // namespace segtrain::trainer
