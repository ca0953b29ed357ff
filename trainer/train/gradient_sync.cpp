#include "trainer/train/gradient_sync.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <string>

namespace segtrain::trainer {

struct GradientSync::State {
  ProcessGroup* group = nullptr;
  FlatBuckets* flat = nullptr;
  GradientSyncOptions options;
  // A collective in flight and what its sum is handed over as.
  struct InFlight {
    std::unique_ptr<PendingCollective> collective;
    size_t bucket = 0;
    FlatRange range;     // of the bucket's buffers, as the sink sees it
    at::Tensor reduced;  // the sum, once landed: in the bucket, or the reduce-dtype copy
  };
  std::vector<size_t> ready_members;  // by bucket: members whose gradient was accumulated this step
  std::vector<char> started;          // by bucket
  std::vector<char> ready;            // by parameter
  std::vector<InFlight> pending;  // by collective (segment), in the order started
  size_t next = 0;  // buckets start in index order
  bool armed = false;
  int64_t late_param = -1;  // a gradient that arrived after its bucket started
  Stats stats;
  std::mutex mutex;

  // Gloo: at most group->in_flight_limit() collectives in flight; starting one
  // first waits for the one that many places before it (long done, as a
  // rule), so the buffers Gloo allocates for a collective (its reduce-scatter's
  // all-to-all) exist for a few segments at a time, never for all of them.
  // NCCL has no limit: no wait inside backward (it would stop the autograd
  // thread from queueing kernels); finish() orders the stream after them all.
  // A segment reduced in another dtype goes through a temporary copy that
  // lives until its collective lands: at most kTemporariesInFlight of those
  // exist at a time on any backend, never one for every segment (4 bytes a
  // parameter for fp32 copies of bf16 gradients). On NCCL landing one only
  // orders the stream after it, so backward is not held up.
  static constexpr size_t kTemporariesInFlight = 4;

  void start(size_t b) {
    const FlatBucket& bucket = flat->buckets()[b];
    const bool temporaries = options.reduce_dtype && *options.reduce_dtype != bucket.grads.scalar_type();
    const size_t limit = temporaries ? std::max(group->in_flight_limit(), kTemporariesInFlight)
                                     : group->in_flight_limit();
    const bool scatter = options.reduction == Reduction::reduce_scatter;
    const int64_t world = group->world_size(), rank = group->rank();
    for (const auto& segment : bucket.segments) {
      if (limit > 0 && pending.size() >= limit) land(pending[pending.size() - limit]);
      at::Tensor grads = bucket.grads.narrow(0, segment.begin, segment.numel);
      if (options.reduce_dtype && *options.reduce_dtype != grads.scalar_type()) grads = grads.to(*options.reduce_dtype);
      InFlight f;
      f.collective = scatter ? group->reduce_scatter_sum_async(grads) : group->all_reduce_sum_async(grads);
      f.bucket = b;
      const int64_t part = scatter ? segment.numel / world : segment.numel;
      f.range = {segment.begin + (scatter ? rank * part : 0), part};
      f.reduced = grads.narrow(0, f.range.begin - segment.begin, part);
      pending.push_back(std::move(f));
    }
    started[b] = 1;
  }

  // Waits for one collective (once) and hands its sum to the sink.
  void land(InFlight& f) {
    if (!f.collective) return;
    f.collective->wait();
    f.collective.reset();
    if (options.sink) options.sink(f.bucket, f.range, f.reduced);
    f.reduced.reset();
  }

  // Called by backward (the hook) once parameter i's .grad holds this micro-batch's share.
  void accumulated(size_t i) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!armed) return;
    const size_t b = flat->bucket_of(i);
    if (started[b]) {
      if (late_param < 0) late_param = static_cast<int64_t>(i);
      return;
    }
    if (ready[i]) return;
    ready[i] = 1;
    ++ready_members[b];
    while (next < started.size() && ready_members[next] == flat->buckets()[next].members.size()) {
      start(next++);
      ++stats.started_in_backward;
    }
  }

  // Runs in AccumulateGrad, right after parameter `index`'s .grad was updated.
  struct Hook : torch::autograd::PostAccumulateGradHook {
    Hook(std::weak_ptr<State> s, size_t i) : state(std::move(s)), index(i) {}
    void operator()(const torch::autograd::Variable& /*param*/) override {
      if (auto s = state.lock()) s->accumulated(index);
    }
    std::weak_ptr<State> state;
    size_t index;
  };
};

GradientSync::GradientSync(ProcessGroup& group, FlatBuckets& flat, GradientSyncOptions options)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.group = &group;
  s.flat = &flat;
  s.options = std::move(options);
  const size_t buckets = flat.buckets().size();
  s.ready_members.assign(buckets, 0);
  s.started.assign(buckets, 0);
  s.ready.assign(flat.params().size(), 0);
  s.stats.buckets = static_cast<int64_t>(buckets);
  for (size_t i = 0; i < flat.params().size(); ++i) {
    TORCH_CHECK(!torch::autograd::impl::post_acc_grad_hooks(flat.params()[i]),
                "a parameter already has a post-accumulate hook");
    torch::autograd::impl::set_post_acc_grad_hooks(flat.params()[i], std::make_unique<State::Hook>(state_, i));
  }
}

GradientSync::~GradientSync() {
  for (const auto& p : state_->flat->params()) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

void GradientSync::arm() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  State& s = *state_;
  std::fill(s.ready_members.begin(), s.ready_members.end(), 0);
  std::fill(s.started.begin(), s.started.end(), 0);
  std::fill(s.ready.begin(), s.ready.end(), 0);
  s.pending.clear();
  s.next = 0;
  s.late_param = -1;
  s.stats.started_in_backward = 0;
  s.armed = true;
}

void GradientSync::finish() {
  std::lock_guard<std::mutex> lock(state_->mutex);  // backward is over
  State& s = *state_;
  s.armed = false;
  while (s.next < s.started.size()) s.start(s.next++);
  for (auto& f : s.pending) s.land(f);
  s.pending.clear();
  if (s.late_param >= 0)
    throw std::runtime_error("distributed: parameter " + std::to_string(s.late_param) +
                             " received a gradient after its bucket was already being summed over ranks (a "
                             "parameter used in two activation-checkpointed segments); this step's gradients are "
                             "not valid: turn model.activation_checkpointing off");
}

GradientSync::Stats GradientSync::stats() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->stats;
}

}  // namespace segtrain::trainer
