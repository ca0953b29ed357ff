#include "trainer/train/gradient_sync.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <mutex>
#include <stdexcept>
#include <string>

namespace segtrain::trainer {

struct GradientSync::State {
  ProcessGroup* group = nullptr;
  FlatBuckets* flat = nullptr;
  Reduction reduction = Reduction::all_reduce;
  std::vector<size_t> ready_members;  // by bucket: members whose gradient was accumulated this step
  std::vector<char> started;          // by bucket
  std::vector<char> ready;            // by parameter
  std::vector<std::unique_ptr<PendingCollective>> pending;  // by collective (segment), in the order started
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
  void start(size_t b) {
    const FlatBucket& bucket = flat->buckets()[b];
    const size_t limit = group->in_flight_limit();
    for (const auto& segment : bucket.segments) {
      if (limit > 0 && pending.size() >= limit && pending[pending.size() - limit]) {
        pending[pending.size() - limit]->wait();
        pending[pending.size() - limit].reset();
      }
      const at::Tensor grads = bucket.grads.narrow(0, segment.begin, segment.numel);
      pending.push_back(reduction == Reduction::all_reduce ? group->all_reduce_sum_async(grads)
                                                           : group->reduce_scatter_sum_async(grads));
    }
    started[b] = 1;
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

GradientSync::GradientSync(ProcessGroup& group, FlatBuckets& flat, Reduction reduction)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.group = &group;
  s.flat = &flat;
  s.reduction = reduction;
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
  for (auto& p : s.pending)
    if (p) p->wait();
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
