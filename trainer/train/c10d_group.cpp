// The c10d process group behind distributed.h: Gloo, or NCCL on CUDA builds;
// rendezvous.h finds the peers first.
#include "trainer/train/distributed.h"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
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
#include <exception>
#include <functional>
#include <optional>
#include <sstream>
#include <utility>

#include "common/error.h"
#include "common/log.h"
#include "trainer/train/network.h"
#include "trainer/train/rendezvous.h"

namespace segtrain::trainer {
namespace {

using namespace rendezvous;  // NOLINT: the distributed code's own internal header

// Waits for a c10d collective and turns any failure into one line that says
// what it means and which peer it was. Gloo: on the host, at most `timeout`
// (Gloo's own timeout should fire first). NCCL (`host_timeout` nullopt): the
// wait without a timeout only orders the caller's stream after the collective
// (ProcessGroupNCCL::WorkNCCL::wait); a timeout would make it poll on the host
// instead. Its watchdog keeps distributed.timeout_s (Options::timeout).
void wait_for(const c10::intrusive_ptr<c10d::Work>& work, const char* what,
              std::optional<std::chrono::milliseconds> host_timeout, std::chrono::milliseconds timeout,
              const Peers& peers) {
  try {
    if (host_timeout) work->wait(*host_timeout);
    else work->wait();
  } catch (const std::exception& err) {
    throw std::runtime_error(std::string("distributed: ") + what + " failed: a peer rank died or did not answer within " +
                             std::to_string(timeout.count() / 1000) + " s (distributed.timeout_s): " +
                             peers.annotate(message_of(err)) + debug_detail(err));
  }
}

// Collectives in flight that complete together, and what puts their result in
// place once they have (`land`: a staged copy copied back, an all-to-all summed).
class C10dPending : public PendingCollective {
 public:
  C10dPending(std::vector<c10::intrusive_ptr<c10d::Work>> works, const char* what,
              std::optional<std::chrono::milliseconds> host_timeout, std::chrono::milliseconds timeout,
              std::shared_ptr<const Peers> peers, std::function<void()> land)
      : works_(std::move(works)),
        what_(what),
        host_timeout_(host_timeout),
        timeout_(timeout),
        peers_(std::move(peers)),
        land_(std::move(land)) {}
  void wait() override {
    for (auto& work : works_) wait_for(work, what_, host_timeout_, timeout_, *peers_);
    works_.clear();
    if (land_) std::exchange(land_, {})();
  }

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  const char* what_;
  std::optional<std::chrono::milliseconds> host_timeout_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<const Peers> peers_;
  std::function<void()> land_;
};

// One c10d backend: Gloo, or NCCL on CUDA builds (`device` set). NCCL only
// takes tensors on its device, so CPU tensors are staged there.
class C10dGroup : public ProcessGroup {
 public:
  C10dGroup(c10::intrusive_ptr<c10d::Backend> backend, std::optional<at::Device> device,
            std::chrono::milliseconds timeout, std::shared_ptr<const Peers> peers)
      : backend_(std::move(backend)),
        device_(device),
        timeout_(timeout),
        host_timeout_(device ? std::nullopt : std::optional(timeout)),
        peers_(std::move(peers)) {}
  // A clean shutdown prints nothing (PyTorch warns "destroy_process_group() was
  // not called" from a group destroyed without one); during unwinding the
  // group aborts, since a peer may be gone.
  ~C10dGroup() override {
    if (closed_) return;
    try {
      if (std::uncaught_exceptions() > 0) backend_->abort();
      else backend_->shutdown();
    } catch (const std::exception& err) {
      log::debug("distributed: shutting the process group down: ", message_of(err));
    }
  }
  void shutdown() override {
    if (std::exchange(closed_, true)) return;
    try {
      backend_->shutdown();
    } catch (const std::exception& err) {
      log::debug("distributed: shutting the process group down: ", message_of(err));
    }
  }
  size_t in_flight_limit() const override { return device_ ? 0 : 3; }
  int64_t host_waits() const override { return host_waits_; }
  int64_t rank() const override { return backend_->getRank(); }
  int64_t world_size() const override { return backend_->getSize(); }
  void broadcast(std::vector<at::Tensor>& tensors) override {
    for (auto& t : tensors) {
      std::vector<at::Tensor> one{staged(t)};
      wait_for(backend_->broadcast(one), "broadcast", host_timeout_, timeout_, *peers_);
      if (!one[0].is_same(t)) t.copy_(one[0]);
      ++host_waits_;
    }
    check_healthy();
  }
  void all_reduce_sum(std::vector<at::Tensor>& tensors) override {
    for (auto& t : tensors) all_reduce_sum_async(t)->wait();
    ++host_waits_;
    check_healthy();
  }
  void check_healthy() const override {
    if (!device_) return;
    const c10d::ErrorType error = backend_->getError();
    if (error == c10d::ErrorType::SUCCESS) return;
    throw std::runtime_error(std::string("distributed: a collective failed: a peer rank died or did not answer "
                                         "within ") +
                             std::to_string(timeout_.count() / 1000) + " s (distributed.timeout_s); NCCL reports " +
                             (error == c10d::ErrorType::TIMEOUT ? "a timeout" : "a communication error") +
                             " and has aborted the communicator");
  }
  std::unique_ptr<PendingCollective> all_reduce_sum_async(const at::Tensor& tensor) override {
    std::vector<at::Tensor> one{staged(tensor)};
    auto work = backend_->allreduce(one);
    std::function<void()> land;  // NCCL on a staged copy: the sum goes back to the CPU tensor
    if (!one[0].is_same(tensor)) land = [staged = one[0], target = tensor]() mutable { target.copy_(staged); };
    return pending({std::move(work)}, "all_reduce", std::move(land));
  }
  // Flat gradient and parameter buckets live on the group's device already.
  // ProcessGroupGloo's reduce_scatter_tensor clones the whole input and
  // all-reduces the clone (reduce_scatter_tensor_coalesced): a second copy of
  // every gradient until the step's collectives are waited for, and twice
  // the traffic of a reduce-scatter. On Gloo it is an all-to-all instead
  // (alltoall_base, in place on the input), summed by the receiver.
  std::unique_ptr<PendingCollective> reduce_scatter_sum_async(const at::Tensor& whole) override {
    at::Tensor input = whole, mine = own_slice(whole);
    if (!device_) {
      at::Tensor received = at::empty_like(whole);
      std::vector<int64_t> equal_splits;
      auto work = backend_->alltoall_base(received, input, equal_splits, equal_splits);
      // Rank r receives every rank's copy of its slice and sums them, in rank order.
      return pending({std::move(work)}, "reduce_scatter (all-to-all)", [received, mine]() mutable {
        at::sum_out(mine, received.view({-1, mine.numel()}), {0});
        received.reset();
      });
    }
    return pending({backend_->_reduce_scatter_base(mine, input)}, "reduce_scatter");
  }
  // ProcessGroupGloo's all-gather gathers into a buffer of its own, allocated
  // on its worker thread (whose malloc arena keeps it); on Gloo each rank's
  // slice is broadcast from its owner instead, in place.
  std::unique_ptr<PendingCollective> all_gather_async(const at::Tensor& whole) override {
    at::Tensor output = whole, mine = own_slice(whole);
    if (!device_) {
      std::vector<c10::intrusive_ptr<c10d::Work>> works;
      const int64_t n = whole.numel() / world_size();
      for (int64_t root = 0; root < world_size(); ++root) {
        std::vector<at::Tensor> slice{whole.narrow(0, root * n, n)};
        c10d::BroadcastOptions options;
        options.rootRank = root;
        works.push_back(backend_->broadcast(slice, options));
      }
      return pending(std::move(works), "all_gather (broadcasts)");
    }
    return pending({backend_->_allgather_base(output, mine)}, "all_gather");
  }
  void barrier() override {
    // A barrier is a host wait by definition: even NCCL's blocks until done.
    wait_for(backend_->barrier(), "barrier", timeout_, timeout_, *peers_);
    ++host_waits_;
    check_healthy();
  }

 private:
  std::unique_ptr<PendingCollective> pending(std::vector<c10::intrusive_ptr<c10d::Work>> works, const char* what,
                                             std::function<void()> land = {}) const {
    return std::make_unique<C10dPending>(std::move(works), what, host_timeout_, timeout_, peers_, std::move(land));
  }
  at::Tensor staged(const at::Tensor& t) const { return device_ && t.device() != *device_ ? t.to(*device_) : t; }
  at::Tensor own_slice(const at::Tensor& whole) const {
    TORCH_CHECK(whole.dim() == 1 && whole.is_contiguous() && whole.numel() % world_size() == 0,
                "a sharded collective needs a contiguous 1-D tensor whose length divides by the world size");
    const int64_t n = whole.numel() / world_size();
    return whole.narrow(0, rank() * n, n);
  }

  c10::intrusive_ptr<c10d::Backend> backend_;
  std::optional<at::Device> device_;
  std::chrono::milliseconds timeout_;
  std::optional<std::chrono::milliseconds> host_timeout_;  // Gloo's; NCCL waits on the stream
  std::shared_ptr<const Peers> peers_;
  int64_t host_waits_ = 0;
  bool closed_ = false;
};

// The Gloo devices of this rank and the address it advertises, as PyTorch
// picks them (ProcessGroupGloo in torch/csrc/distributed/c10d/init.cpp): the
// interfaces GLOO_SOCKET_IFNAME names (comma-separated), else the address that
// reaches MASTER_ADDR, never the hostname's loopback fallback of
// createDefaultDevice (a 127.0.0.1 no other node can connect to). For a
// loopback master that is 127.0.0.1, as before.
struct GlooDevices {
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
  std::string address, why;
};

GlooDevices gloo_devices(const DistributedEnv& e) {
  GlooDevices out;
  if (const char* set = std::getenv("GLOO_SOCKET_IFNAME"); set && *set) {
    const std::optional<std::string> names = std::string(set);
    std::stringstream list(*names);
    for (std::string name; std::getline(list, name, ',');) {
      if (name.empty()) continue;
      const std::string address = interface_address(name, "GLOO_SOCKET_IFNAME=" + *names);
      if (out.address.empty()) out.address = address;
      try {
        out.devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
      } catch (const std::exception& err) {
        throw InputError("GLOO_SOCKET_IFNAME=" + *names + ": Gloo cannot use interface '" + name +
                         "': " + message_of(err) + debug_detail(err));
      }
    }
    if (out.devices.empty()) throw InputError("GLOO_SOCKET_IFNAME=" + *names + ": names no interface");
    out.why = "GLOO_SOCKET_IFNAME=" + *names;
    return out;
  }
  out.address = local_address_towards(e.master_addr, static_cast<int>(e.master_port), "MASTER_ADDR=" + e.master_addr);
  try {
    out.devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(out.address));
  } catch (const std::exception& err) {
    throw std::runtime_error("distributed: Gloo cannot bind " + out.address +
                             " (the address that reaches MASTER_ADDR=" + e.master_addr + "): " + message_of(err) +
                             "; name the interface with GLOO_SOCKET_IFNAME" + debug_detail(err));
  }
  out.why = "the local address that reaches MASTER_ADDR=" + e.master_addr;
  return out;
}

}  // namespace

std::unique_ptr<ProcessGroup> connect(const DistributedEnv& env, const DistributedConfig& config,
                                      const at::Device& device) {
  const Backend backend = resolve_backend(config.backend, device.is_cuda());
  if (env.world_size == 1) return nullptr;
  const auto timeout = std::chrono::milliseconds(config.timeout_s * 1000);
  const auto deadline = Clock::now() + timeout;  // the whole rendezvous: store and join
  const QuietC10Log quiet;
#if SEGTRAIN_WITH_NCCL
  if (backend == Backend::nccl) {
    // NCCL picks its own interface: libnccl reads NCCL_SOCKET_IFNAME (and
    // NCCL_IB_HCA, ...) from the environment by itself; nothing here or in
    // segtrain-launch sets or clears them. The address below only names peers.
    const std::string address =
        local_address_towards(env.master_addr, static_cast<int>(env.master_port), "MASTER_ADDR=" + env.master_addr);
    const auto store = make_store(env, config, deadline);
    const auto peers = join(*store, env, address, 1, /*probe_port=*/0, deadline, config.timeout_s);
    // A dead peer must end this rank with one line and exit 1 (check_healthy),
    // not a SIGABRT from the watchdog thread (PyTorch's default, 3: rethrow
    // there) nor a kill by its heartbeat monitor: 2 aborts the communicator
    // and only records the error. Read by the constructor; a user's own
    // setting is kept.
    ::setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2", 0);
    ::setenv("TORCH_NCCL_ENABLE_MONITORING", "0", 0);
    ::setenv("TORCH_NCCL_DUMP_ON_TIMEOUT", "0", 0);
    ::setenv("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", "250", 0);  // the watchdog's wait before it aborts: 4x this
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world_size, options);
    return std::make_unique<C10dGroup>(nccl, device, timeout, peers);
  }
#endif
  (void)backend;  // gloo
  // The interface first: a wrong GLOO_SOCKET_IFNAME is reported at once.
  GlooDevices local = gloo_devices(env);
  log::info("rank ", env.rank, ": Gloo binds ", local.address, " (", local.why, ")");
  const ReachabilityListener probe(local.address);  // open until Gloo has connected
  const auto store = make_store(env, config, deadline);
  const auto peers = join(*store, env, local.address, static_cast<int64_t>(local.devices.size()), probe.port(),
                          deadline, config.timeout_s);
  // c10d pairs the ranks' devices one to one (a Gloo context each).
  for (int64_t r = 0; r < env.world_size; ++r)
    if (peers->devices[r] != peers->devices[env.rank])
      throw InputError("GLOO_SOCKET_IFNAME: " + peers->rank_at(env.rank) + " has " +
                       std::to_string(peers->devices[env.rank]) + " Gloo interface(s) but " + peers->rank_at(r) +
                       " has " + std::to_string(peers->devices[r]) +
                       "; list the same number of interfaces on every node (or set it on none)");
  if (const std::string hint = loopback_hint(*peers, false); !hint.empty()) log::warn("distributed: ", hint);
  // Ranks that arrived late still get a few seconds to connect.
  check_reachable(*peers, std::max(deadline, Clock::now() + std::chrono::seconds(5)), config.timeout_s);
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices = std::move(local.devices);
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
  try {
    gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.world_size, options);
  } catch (const std::exception& err) {
    const std::string hint = loopback_hint(*peers, true);
    throw std::runtime_error("distributed: " + peers->rank_at(env.rank) +
                             " could not connect to its peers over Gloo: " + peers->annotate(message_of(err)) +
                             (hint.empty() ? "" : "; " + hint) + debug_detail(err));
  }
  return std::make_unique<C10dGroup>(gloo, std::nullopt, timeout, peers);
}

}  // namespace segtrain::trainer
