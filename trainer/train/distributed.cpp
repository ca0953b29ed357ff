#include "trainer/train/distributed.h"

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
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

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "trainer/train/network.h"

namespace segtrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;

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

// What a c10d failure says, on one line: c10::Error's message without its C++
// backtrace, Gloo's source locations ("[.../pair.cc:534] ") dropped, newlines
// folded.
std::string message_of(const std::exception& err) {
  const auto* c10 = dynamic_cast<const c10::Error*>(&err);
  std::string text = c10 ? c10->what_without_backtrace() : err.what();
  static const std::regex source_location(R"(\[[^\]\s]*\.(cc|cpp|h|hpp):\d+\]\s*)");
  text = std::regex_replace(text, source_location, "");
  for (auto& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  text = std::regex_replace(text, std::regex(" {2,}"), " ");
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

// What follows that line at run.log_level: debug only: the unabridged text,
// with LibTorch's backtrace ("Exception raised from ...", "frame #N").
std::string debug_detail(const std::exception& err) {
  return log::enabled(log::Level::debug) ? std::string("\n") + err.what() : "";
}

// "rank 3", "ranks 1, 2 and 5", at most `shown` of them named.
std::string ranks_text(const std::vector<int64_t>& ranks, size_t shown = 8) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size() && i < shown; ++i)
    out += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  if (ranks.size() > shown) out += " and " + std::to_string(ranks.size() - shown) + " more";
  return out;
}

// c10 logs what connect() reports itself: "[c10d] The hostname of the client
// socket cannot be retrieved" on every node without reverse DNS, and
// ProcessGroupGloo's "Gloo connectFullMesh failed with ..." just before it
// throws. Quiet (below FATAL) while connecting, except at run.log_level: debug.
class QuietC10Log {
 public:
  QuietC10Log() : saved_(FLAGS_caffe2_log_level) {
    if (!log::enabled(log::Level::debug)) FLAGS_caffe2_log_level = std::max(saved_, 3);
  }
  ~QuietC10Log() { FLAGS_caffe2_log_level = saved_; }
  QuietC10Log(const QuietC10Log&) = delete;
  QuietC10Log& operator=(const QuietC10Log&) = delete;

 private:
  int saved_;
};

// Every rank's address as it told the others in the rendezvous, so that a
// failure can name the peer behind an address.
struct Peers {
  int64_t self = 0;
  std::vector<std::string> addresses;  // by rank
  std::vector<int64_t> devices;        // Gloo devices (GLOO_SOCKET_IFNAME entries) by rank
  std::vector<int> probe_ports;        // their ReachabilityListener's port (0: none), by rank

  std::vector<int64_t> ranks_at(const std::string& address) const {
    std::vector<int64_t> out;
    for (size_t r = 0; r < addresses.size(); ++r)
      if (addresses[r] == address && static_cast<int64_t>(r) != self) out.push_back(static_cast<int64_t>(r));
    return out;
  }
  std::string rank_at(int64_t rank) const { return "rank " + std::to_string(rank) + " (" + addresses[rank] + ")"; }

  // Names the rank after each "[address]:port" of a c10d message (dropping
  // Gloo's "$<sequence>" suffix); when the message names no known peer, lists
  // the other ranks (up to four).
  std::string annotate(const std::string& message) const {
    static const std::regex endpoint(R"(\[([0-9A-Fa-f:.]+)\]:(\d+)(\$\d+)?)");
    std::string out;
    bool named = false;
    auto begin = std::sregex_iterator(message.begin(), message.end(), endpoint);
    size_t copied = 0;
    for (auto it = begin; it != std::sregex_iterator(); ++it) {
      const auto& m = *it;
      out += message.substr(copied, static_cast<size_t>(m.position(0)) - copied) + "[" + m[1].str() + "]:" + m[2].str();
      copied = static_cast<size_t>(m.position(0) + m.length(0));
      const auto ranks = ranks_at(m[1].str());
      if (!ranks.empty()) out += " (" + ranks_text(ranks) + ")", named = true;
    }
    out += message.substr(copied);
    if (!named && addresses.size() > 1) {
      std::string others;
      int listed = 0;
      for (size_t r = 0; r < addresses.size(); ++r) {
        if (static_cast<int64_t>(r) == self) continue;
        if (listed++ == 4) {
          others += ", ...";
          break;
        }
        others += (others.empty() ? "" : ", ") + rank_at(static_cast<int64_t>(r));
      }
      out += " [peers: " + others + "]";
    }
    return out;
  }
};

// Waits for a c10d collective, at most `timeout` (Gloo's own timeout should
// fire first), and turns any failure into one line that says what it means
// and which peer it was.
void wait_for(const c10::intrusive_ptr<c10d::Work>& work, const char* what, std::chrono::milliseconds timeout,
              const Peers& peers) {
  try {
    work->wait(timeout);
  } catch (const std::exception& err) {
    throw std::runtime_error(std::string("distributed: ") + what + " failed: a peer rank died or did not answer within " +
                             std::to_string(timeout.count() / 1000) + " s (distributed.timeout_s): " +
                             peers.annotate(message_of(err)) + debug_detail(err));
  }
}

class C10dPending : public PendingCollective {
 public:
  C10dPending(c10::intrusive_ptr<c10d::Work> work, const char* what, std::chrono::milliseconds timeout,
              at::Tensor staged, at::Tensor target, std::shared_ptr<const Peers> peers)
      : work_(std::move(work)),
        what_(what),
        timeout_(timeout),
        staged_(std::move(staged)),
        target_(std::move(target)),
        peers_(std::move(peers)) {}
  void wait() override {
    wait_for(work_, what_, timeout_, *peers_);
    if (target_.defined()) target_.copy_(staged_);
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  const char* what_;
  std::chrono::milliseconds timeout_;
  at::Tensor staged_, target_;  // target_ is set when the collective ran on a copy
  std::shared_ptr<const Peers> peers_;
};

// Several collectives that complete together.
class C10dPendingAll : public PendingCollective {
 public:
  C10dPendingAll(std::vector<c10::intrusive_ptr<c10d::Work>> works, const char* what, std::chrono::milliseconds timeout,
                 std::shared_ptr<const Peers> peers)
      : works_(std::move(works)), what_(what), timeout_(timeout), peers_(std::move(peers)) {}
  void wait() override {
    for (auto& work : works_) wait_for(work, what_, timeout_, *peers_);
  }

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  const char* what_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<const Peers> peers_;
};

// A reduce-scatter built from an all-to-all: rank r receives every rank's copy
// of its slice and sums them itself, in rank order.
class AllToAllReduceScatter : public PendingCollective {
 public:
  AllToAllReduceScatter(c10::intrusive_ptr<c10d::Work> work, at::Tensor received, at::Tensor mine,
                        std::chrono::milliseconds timeout, std::shared_ptr<const Peers> peers)
      : work_(std::move(work)),
        received_(std::move(received)),
        mine_(std::move(mine)),
        timeout_(timeout),
        peers_(std::move(peers)) {}
  void wait() override {
    wait_for(work_, "reduce_scatter (all-to-all)", timeout_, *peers_);
    at::sum_out(mine_, received_.view({-1, mine_.numel()}), {0});
    received_.reset();
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  at::Tensor received_, mine_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<const Peers> peers_;
};

// One c10d backend (Gloo, or NCCL on CUDA builds). NCCL only takes tensors on
// its device, so CPU tensors (the loop's scalar sums) are staged there.
class C10dGroup : public ProcessGroup {
 public:
  C10dGroup(c10::intrusive_ptr<c10d::Backend> backend, std::optional<at::Device> device,
            std::chrono::milliseconds timeout, std::shared_ptr<const Peers> peers, bool native_sharded_collectives)
      : backend_(std::move(backend)),
        device_(device),
        timeout_(timeout),
        peers_(std::move(peers)),
        native_sharded_collectives_(native_sharded_collectives) {}
  int64_t rank() const override { return backend_->getRank(); }
  int64_t world_size() const override { return backend_->getSize(); }
  void broadcast(std::vector<at::Tensor>& tensors) override {
    for (auto& t : tensors) {
      std::vector<at::Tensor> one{staged(t)};
      wait_for(backend_->broadcast(one), "broadcast", timeout_, *peers_);
      if (!one[0].is_same(t)) t.copy_(one[0]);
    }
  }
  void all_reduce_sum(std::vector<at::Tensor>& tensors) override {
    for (auto& t : tensors) all_reduce_sum_async(t)->wait();
  }
  std::unique_ptr<PendingCollective> all_reduce_sum_async(const at::Tensor& tensor) override {
    std::vector<at::Tensor> one{staged(tensor)};
    auto work = backend_->allreduce(one);
    return std::make_unique<C10dPending>(std::move(work), "all_reduce", timeout_, one[0],
                                         one[0].is_same(tensor) ? at::Tensor() : tensor, peers_);
  }
  // Flat gradient and parameter buckets live on the group's device already.
  // ProcessGroupGloo's reduce_scatter_tensor clones the whole input and
  // all-reduces the clone (reduce_scatter_tensor_coalesced): a second copy of
  // every gradient until the step's collectives are waited for, and twice
  // the traffic of a reduce-scatter. On Gloo it is an all-to-all instead
  // (alltoall_base, in place on the input), summed by the receiver.
  std::unique_ptr<PendingCollective> reduce_scatter_sum_async(const at::Tensor& whole) override {
    at::Tensor input = whole, mine = own_slice(whole);
    if (!native_sharded_collectives_) {
      at::Tensor received = at::empty_like(whole);
      std::vector<int64_t> equal_splits;
      auto work = backend_->alltoall_base(received, input, equal_splits, equal_splits);
      return std::make_unique<AllToAllReduceScatter>(std::move(work), received, mine, timeout_, peers_);
    }
    auto work = backend_->_reduce_scatter_base(mine, input);
    return std::make_unique<C10dPending>(std::move(work), "reduce_scatter", timeout_, at::Tensor(), at::Tensor(),
                                         peers_);
  }
  // ProcessGroupGloo's all-gather gathers into a buffer of its own, allocated
  // on its worker thread (whose malloc arena keeps it); on Gloo each rank's
  // slice is broadcast from its owner instead, in place.
  std::unique_ptr<PendingCollective> all_gather_async(const at::Tensor& whole) override {
    at::Tensor output = whole, mine = own_slice(whole);
    if (!native_sharded_collectives_) {
      std::vector<c10::intrusive_ptr<c10d::Work>> works;
      const int64_t n = whole.numel() / world_size();
      for (int64_t root = 0; root < world_size(); ++root) {
        std::vector<at::Tensor> slice{whole.narrow(0, root * n, n)};
        c10d::BroadcastOptions options;
        options.rootRank = root;
        works.push_back(backend_->broadcast(slice, options));
      }
      return std::make_unique<C10dPendingAll>(std::move(works), "all_gather (broadcasts)", timeout_, peers_);
    }
    auto work = backend_->_allgather_base(output, mine);
    return std::make_unique<C10dPending>(std::move(work), "all_gather", timeout_, at::Tensor(), at::Tensor(), peers_);
  }
  void barrier() override { wait_for(backend_->barrier(), "barrier", timeout_, *peers_); }

 private:
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
  std::shared_ptr<const Peers> peers_;
  bool native_sharded_collectives_;
};

std::string master_text(const DistributedEnv& e) { return e.master_addr + ":" + std::to_string(e.master_port); }

std::chrono::milliseconds left(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

// Rendezvous keys (beside c10d's own): each rank's address, and rank 0's mark
// that everybody arrived.
std::string joined_key(int64_t rank) { return "segtrain/joined/" + std::to_string(rank); }
const std::string kComplete = "segtrain/complete";

// The TCPStore: rank 0 hosts it (torchrun's agent does under
// TORCHELASTIC_USE_AGENT_STORE). A client that reaches a store whose rendezvous
// is already complete has found the previous attempt's master, still shutting
// down after a launcher restart on another node: it waits for the new one.
c10::intrusive_ptr<c10d::Store> make_store(const DistributedEnv& e, const DistributedConfig& config,
                                           Clock::time_point deadline) {
  const auto timeout = std::chrono::milliseconds(config.timeout_s * 1000);
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(e.master_port);
  options.isServer = e.rank == 0 && !e.agent_store;
  options.numWorkers = e.agent_store ? std::nullopt : std::optional<std::size_t>(e.world_size);
  options.waitWorkers = false;  // join() waits, and names the ranks that never came
  for (;;) {
    options.timeout = left(deadline);
    c10::intrusive_ptr<c10d::Store> store;
    try {
      store = c10::make_intrusive<c10d::TCPStore>(e.master_addr, options);
    } catch (const std::exception& err) {
      throw InputError("MASTER_ADDR/MASTER_PORT: cannot reach the rendezvous store at " + master_text(e) + " within " +
                       std::to_string(config.timeout_s) + " s (distributed.timeout_s): " + message_of(err) +
                       debug_detail(err));
    }
    store->setTimeout(timeout);
    if (e.agent_store)  // torchrun's agent hosts the store; each restart gets its own keys
      store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(e.restart), store);
    bool stale = false;
    if (!options.isServer) {
      try {
        stale = store->check({kComplete});
      } catch (const std::exception&) {
        stale = true;  // it went away while we asked
      }
    }
    if (!stale) return store;
    if (Clock::now() >= deadline)
      throw InputError("MASTER_ADDR/MASTER_PORT: the store at " + master_text(e) +
                       " still belongs to a previous attempt of this job after " + std::to_string(config.timeout_s) +
                       " s (distributed.timeout_s); is an old rank 0 still running?");
    log::debug("the store at ", master_text(e), " belongs to a previous attempt; waiting for the new rank 0");
    store.reset();
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

// Every rank publishes its address (with how many Gloo devices it has and the
// port of its reachability listener) and waits for all others until the
// deadline; one that never came is named (with its node when every node runs
// LOCAL_WORLD_SIZE ranks).
std::shared_ptr<const Peers> join(c10d::Store& store, const DistributedEnv& e, const std::string& address,
                                  int64_t devices, int probe_port, Clock::time_point deadline, int64_t timeout_s) {
  const std::string mine = address + " " + std::to_string(devices) + " " + std::to_string(probe_port);
  store.set(joined_key(e.rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  std::vector<std::string> keys;
  for (int64_t r = 0; r < e.world_size; ++r) keys.push_back(joined_key(r));
  try {
    store.wait(keys, left(deadline));
  } catch (const std::exception& err) {
    std::vector<int64_t> missing;
    try {
      for (int64_t r = 0; r < e.world_size; ++r)
        if (!store.check({joined_key(r)})) missing.push_back(r);
    } catch (const std::exception&) {
      missing.clear();
    }
    if (missing.empty())
      throw std::runtime_error("distributed: rank " + std::to_string(e.rank) + " lost the rendezvous store at " +
                               master_text(e) + ": " + message_of(err) + debug_detail(err));
    std::string nodes;
    if (e.world_size > e.local_world_size && e.world_size % e.local_world_size == 0) {
      std::vector<int64_t> node_ids;
      for (int64_t r : missing)
        if (node_ids.empty() || node_ids.back() != r / e.local_world_size) node_ids.push_back(r / e.local_world_size);
      nodes = ranks_text(node_ids);
      nodes = std::string(" (") + (node_ids.size() == 1 ? "node" : "nodes") + nodes.substr(nodes.find(' ')) + ")";
    }
    throw InputError("distributed: " + ranks_text(missing) + nodes + " of " + std::to_string(e.world_size) +
                     " never joined the rendezvous at " + master_text(e) + " within " + std::to_string(timeout_s) +
                     " s (distributed.timeout_s); rank " + std::to_string(e.rank) + " gives up");
  }
  auto peers = std::make_shared<Peers>();
  peers->self = e.rank;
  for (const auto& key : keys) {
    const auto bytes = store.get(key);
    std::istringstream value(std::string(bytes.begin(), bytes.end()));
    std::string peer_address;
    int64_t peer_devices = 1;
    int peer_port = 0;
    value >> peer_address >> peer_devices >> peer_port;
    peers->addresses.push_back(peer_address);
    peers->devices.push_back(peer_devices);
    peers->probe_ports.push_back(peer_port);
  }
  if (e.rank == 0) store.set(kComplete, std::vector<uint8_t>{'1'});
  return peers;
}

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
  if (const auto names = env("GLOO_SOCKET_IFNAME")) {
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

// Ranks on other hosts cannot reach a loopback address. Before connecting
// (`failed` false) that is only certain when some ranks advertise one and
// others do not; once Gloo failed, any loopback address is suspect.
std::string loopback_hint(const Peers& peers, bool failed) {
  std::vector<int64_t> loopback;
  for (size_t r = 0; r < peers.addresses.size(); ++r)
    if (is_loopback_address(peers.addresses[r])) loopback.push_back(static_cast<int64_t>(r));
  if (loopback.empty() || (!failed && loopback.size() == peers.addresses.size())) return "";
  const bool one = loopback.size() == 1;
  return ranks_text(loopback) + (one ? " advertises" : " advertise") + " a loopback address (" +
         peers.addresses[loopback.front()] + ") that ranks on other hosts cannot reach; set GLOO_SOCKET_IFNAME on " +
         (one ? "its node" : "their nodes") + " to the interface the other nodes reach";
}

// Gloo connects each pair of ranks once, from the one with the larger address;
// when that connection cannot be made (a firewall that drops packets, an address
// routed nowhere) it retries for about five times distributed.timeout_s and then
// names no one. Each rank first connects where Gloo will, to the peer's
// reachability listener, and names the peer it cannot reach by the deadline.
void check_reachable(const Peers& peers, Clock::time_point deadline, int64_t timeout_s) {
  const std::string& self = peers.addresses[peers.self];
  for (size_t r = 0; r < peers.addresses.size(); ++r) {
    if (static_cast<int64_t>(r) == peers.self || peers.probe_ports[r] == 0) continue;
    if (!gloo_connects_to(self, peers.addresses[r])) continue;
    const std::string why = try_connect(peers.addresses[r], peers.probe_ports[r], deadline);
    if (why.empty()) continue;
    const std::string hint = loopback_hint(peers, true);
    throw std::runtime_error("distributed: " + peers.rank_at(peers.self) + " cannot reach " +
                             peers.rank_at(static_cast<int64_t>(r)) + " at the address it advertises within " +
                             std::to_string(timeout_s) + " s (distributed.timeout_s): " + why +
                             "; every rank connects to the others' addresses (set GLOO_SOCKET_IFNAME on rank " +
                             std::to_string(r) + "'s node to an interface the other nodes reach" +
                             (hint.empty() ? "" : "; " + hint) + ")");
  }
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
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world_size, options);
    return std::make_unique<C10dGroup>(nccl, device, timeout, peers, /*native_sharded_collectives=*/true);
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
  return std::make_unique<C10dGroup>(gloo, std::nullopt, timeout, peers, /*native_sharded_collectives=*/false);
}

}  // namespace segtrain::trainer
