#include "trainer/train/distributed.h"

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if SEGTRAIN_WITH_NCCL
// Only on CUDA builds of LibTorch with c10d NCCL (cmake/SegtrainTorch.cmake
// decides). Compiled against torch 2.14.1+cu130 on a machine without a GPU;
// never run there. The CUDA wheel's CMake flags define USE_C10D_NCCL already.
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL  // ProcessGroupNCCL.hpp is empty without it
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "common/error.h"

namespace segtrain::trainer {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

int64_t env_int(const char* name, int64_t fallback, int64_t min) {
  auto text = env(name);
  if (!text) return fallback;
  try {
    size_t used = 0;
    const int64_t v = std::stoll(*text, &used);
    if (used == text->size() && v >= min) return v;
  } catch (const std::exception&) {
  }
  throw InputError(std::string(name) + "=" + *text + ": expected an integer >= " + std::to_string(min));
}

std::string message_of(const std::exception& err) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&err)) return c10->what_without_backtrace();
  return err.what();
}

// Waits for a c10d collective, at most `timeout` (Gloo's own timeout should
// fire first), and turns any failure into one message that says what it means.
void wait_for(const c10::intrusive_ptr<c10d::Work>& work, const char* what, std::chrono::milliseconds timeout) {
  try {
    work->wait(timeout);
  } catch (const std::exception& err) {
    throw std::runtime_error(std::string("distributed: ") + what + " failed: a peer rank died or did not answer within " +
                             std::to_string(timeout.count() / 1000) + " s (distributed.timeout_s): " + message_of(err));
  }
}

class C10dPending : public PendingCollective {
 public:
  C10dPending(c10::intrusive_ptr<c10d::Work> work, std::chrono::milliseconds timeout, at::Tensor staged,
              at::Tensor target)
      : work_(std::move(work)), timeout_(timeout), staged_(std::move(staged)), target_(std::move(target)) {}
  void wait() override {
    wait_for(work_, "all_reduce", timeout_);
    if (target_.defined()) target_.copy_(staged_);
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::chrono::milliseconds timeout_;
  at::Tensor staged_, target_;  // target_ is set when the collective ran on a copy
};

// One c10d backend (Gloo, or NCCL on CUDA builds). NCCL only takes tensors on
// its device, so CPU tensors (the loop's scalar sums) are staged there.
class C10dGroup : public ProcessGroup {
 public:
  C10dGroup(c10::intrusive_ptr<c10d::Backend> backend, std::optional<at::Device> device,
            std::chrono::milliseconds timeout)
      : backend_(std::move(backend)), device_(device), timeout_(timeout) {}
  int64_t rank() const override { return backend_->getRank(); }
  int64_t world_size() const override { return backend_->getSize(); }
  void broadcast(std::vector<at::Tensor>& tensors) override {
    for (auto& t : tensors) {
      std::vector<at::Tensor> one{staged(t)};
      wait_for(backend_->broadcast(one), "broadcast", timeout_);
      if (!one[0].is_same(t)) t.copy_(one[0]);
    }
  }
  void all_reduce_sum(std::vector<at::Tensor>& tensors) override {
    for (auto& t : tensors) all_reduce_sum_async(t)->wait();
  }
  std::unique_ptr<PendingCollective> all_reduce_sum_async(const at::Tensor& tensor) override {
    std::vector<at::Tensor> one{staged(tensor)};
    auto work = backend_->allreduce(one);
    return std::make_unique<C10dPending>(std::move(work), timeout_, one[0],
                                         one[0].is_same(tensor) ? at::Tensor() : tensor);
  }
  void barrier() override { wait_for(backend_->barrier(), "barrier", timeout_); }

 private:
  at::Tensor staged(const at::Tensor& t) const { return device_ && t.device() != *device_ ? t.to(*device_) : t; }

  c10::intrusive_ptr<c10d::Backend> backend_;
  std::optional<at::Device> device_;
  std::chrono::milliseconds timeout_;
};

c10::intrusive_ptr<c10d::Store> make_store(const DistributedEnv& e, const DistributedConfig& config) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(e.master_port);
  options.isServer = e.rank == 0 && !e.agent_store;
  options.numWorkers = e.agent_store ? std::nullopt : std::optional<std::size_t>(e.world_size);
  options.waitWorkers = !e.agent_store;
  options.timeout = std::chrono::milliseconds(config.timeout_s * 1000);
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(e.master_addr, options);
  } catch (const std::exception& err) {
    throw InputError("MASTER_ADDR/MASTER_PORT: cannot reach the rendezvous store at " + e.master_addr + ":" +
                     std::to_string(e.master_port) + " within " + std::to_string(config.timeout_s) +
                     " s (distributed.timeout_s): " + err.what());
  }
  if (e.agent_store)  // torchrun's agent hosts the store; each restart gets its own keys
    store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(e.restart), store);
  return store;
}

}  // namespace

DistributedEnv read_distributed_env() {
  DistributedEnv e;
  const bool slurm = !env("WORLD_SIZE") && env("SLURM_NTASKS");
  e.world_size = env_int(slurm ? "SLURM_NTASKS" : "WORLD_SIZE", 1, 1);
  e.rank = env_int(slurm ? "SLURM_PROCID" : "RANK", 0, 0);
  e.local_rank = env_int(slurm ? "SLURM_LOCALID" : "LOCAL_RANK", e.rank, 0);
  e.local_world_size = env_int("LOCAL_WORLD_SIZE", e.world_size, 1);
  if (e.rank >= e.world_size)
    throw InputError("RANK=" + std::to_string(e.rank) + " is not below WORLD_SIZE=" + std::to_string(e.world_size));
  e.master_addr = env("MASTER_ADDR").value_or("127.0.0.1");
  e.master_port = env_int("MASTER_PORT", 29500, 1);
  if (e.master_port > 65535) throw InputError("MASTER_PORT=" + std::to_string(e.master_port) + ": not a TCP port");
  e.agent_store = env("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
  e.restart = env_int("TORCHELASTIC_RESTART_COUNT", 0, 0);
  return e;
}

Backend resolve_backend(Backend wanted, bool cuda_device) {
  if (wanted == Backend::auto_select) return SEGTRAIN_WITH_NCCL && cuda_device ? Backend::nccl : Backend::gloo;
  if (wanted == Backend::nccl && !SEGTRAIN_WITH_NCCL)
    throw InputError(
        "distributed.backend: nccl is not available: this build of segtrain has no NCCL (LibTorch without CUDA/c10d "
        "NCCL, see `segtrain --version`); use gloo or auto");
  if (wanted == Backend::nccl && !cuda_device)
    throw InputError("distributed.backend: nccl needs run.device cuda (or auto on a machine with a CUDA device)");
  return wanted;
}

std::unique_ptr<ProcessGroup> connect(const DistributedEnv& env, const DistributedConfig& config,
                                      const at::Device& device) {
  const Backend backend = resolve_backend(config.backend, device.is_cuda());
  if (env.world_size == 1) return nullptr;
  const auto timeout = std::chrono::milliseconds(config.timeout_s * 1000);
  const auto store = make_store(env, config);
#if SEGTRAIN_WITH_NCCL
  if (backend == Backend::nccl) {
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world_size, options);
    return std::make_unique<C10dGroup>(nccl, device, timeout);
  }
#endif
  (void)backend;  // gloo
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.world_size, options);
  return std::make_unique<C10dGroup>(gloo, std::nullopt, timeout);
}

// --- GradientSync -------------------------------------------------------------

struct GradientSync::State {
  struct Bucket {
    std::vector<size_t> members;  // parameter indices
    size_t ready = 0;             // members whose gradient was accumulated this step
    bool started = false, stale = false;
    std::vector<size_t> packed;   // members in `flat` (those with a gradient)
    at::Tensor flat;
    std::unique_ptr<PendingCollective> pending;
  };

  ProcessGroup* group = nullptr;
  std::vector<at::Tensor> params;
  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of;
  std::vector<char> ready;
  size_t next = 0;  // buckets start in index order
  bool armed = false;
  Stats stats;
  std::mutex mutex;

  void start(Bucket& b) {
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> parts;
    b.packed.clear();
    for (size_t i : b.members)
      if (params[i].grad().defined()) parts.push_back(params[i].grad().reshape(-1)), b.packed.push_back(i);
    b.started = true;
    if (parts.empty()) return;
    b.flat = at::cat(parts);
    b.pending = group->all_reduce_sum_async(b.flat);
  }

  // Called by backward (the hook) once parameter i's .grad holds this micro-batch's share.
  void accumulated(size_t i) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!armed) return;
    Bucket& b = buckets[bucket_of[i]];
    if (b.started) {
      b.stale = true;
      return;
    }
    if (ready[i]) return;
    ready[i] = 1;
    ++b.ready;
    while (next < buckets.size() && buckets[next].ready == buckets[next].members.size()) {
      start(buckets[next++]);
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

GradientSync::GradientSync(ProcessGroup& group, const std::vector<at::Tensor>& params, int64_t bucket_bytes)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.group = &group;
  for (const auto& p : params)
    if (p.requires_grad()) s.params.push_back(p);
  s.bucket_of.resize(s.params.size());
  s.ready.assign(s.params.size(), 0);
  int64_t size = 0;
  for (size_t i = s.params.size(); i-- > 0;) {
    const int64_t bytes = static_cast<int64_t>(s.params[i].nbytes());
    if (s.buckets.empty() || (size > 0 && size + bytes > bucket_bytes)) s.buckets.emplace_back(), size = 0;
    s.buckets.back().members.push_back(i);
    s.bucket_of[i] = s.buckets.size() - 1;
    size += bytes;
  }
  s.stats.buckets = static_cast<int64_t>(s.buckets.size());
  for (size_t i = 0; i < s.params.size(); ++i) {
    TORCH_CHECK(!torch::autograd::impl::post_acc_grad_hooks(s.params[i]), "a parameter already has a post-accumulate hook");
    torch::autograd::impl::set_post_acc_grad_hooks(s.params[i], std::make_unique<State::Hook>(state_, i));
  }
}

GradientSync::~GradientSync() {
  for (const auto& p : state_->params) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

void GradientSync::arm() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  State& s = *state_;
  for (auto& b : s.buckets) {
    b.ready = 0;
    b.started = b.stale = false;
    b.packed.clear();
    b.flat.reset();
    b.pending.reset();
  }
  std::fill(s.ready.begin(), s.ready.end(), 0);
  s.next = 0;
  s.stats.started_in_backward = s.stats.reduced_again = 0;
  s.armed = true;
}

void GradientSync::finish() {
  std::lock_guard<std::mutex> lock(state_->mutex);  // backward is over
  State& s = *state_;
  s.armed = false;
  while (s.next < s.buckets.size()) s.start(s.buckets[s.next++]);
  at::NoGradGuard no_grad;
  for (auto& b : s.buckets) {
    if (b.pending) b.pending->wait();
    if (b.stale) {  // a gradient grew after the bucket started: reduce it again as it is now
      s.start(b);
      if (b.pending) b.pending->wait();
      ++s.stats.reduced_again;
    }
    int64_t offset = 0;
    for (size_t i : b.packed) {
      at::Tensor& grad = s.params[i].mutable_grad();
      grad.copy_(b.flat.narrow(0, offset, grad.numel()).view_as(grad));
      offset += grad.numel();
    }
    b.flat.reset();
    b.pending.reset();
  }
}

GradientSync::Stats GradientSync::stats() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->stats;
}

}  // namespace segtrain::trainer
