#pragma once
// Internal to the distributed code (distributed.h is its interface): the TCPStore
// rendezvous, every rank's advertised address, the check that the peers reach it,
// and c10d's failures said in one line naming the peer.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "trainer/train/distributed.h"

namespace segtrain::trainer::rendezvous {

using Clock = std::chrono::steady_clock;

// What a c10d failure says, on one line: c10::Error's message without its C++
// backtrace, Gloo's source locations ("[.../pair.cc:534] ") dropped, newlines folded.
std::string message_of(const std::exception& err);

// What follows that line at run.log_level: debug only: the unabridged text,
// with LibTorch's backtrace ("Exception raised from ...", "frame #N").
std::string debug_detail(const std::exception& err);

// "rank 3", "ranks 1, 2 and 5", at most `shown` of them named.
std::string ranks_text(const std::vector<int64_t>& ranks, size_t shown = 8);

// c10 logs what connect() reports itself: "[c10d] The hostname of the client
// socket cannot be retrieved" on every node without reverse DNS, and
// ProcessGroupGloo's "Gloo connectFullMesh failed with ..." just before it
// throws. Quiet (below FATAL) while connecting, except at run.log_level: debug.
class QuietC10Log {
 public:
  QuietC10Log();
  ~QuietC10Log();
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

  std::vector<int64_t> ranks_at(const std::string& address) const {  // other ranks at `address`
    std::vector<int64_t> out;
    for (size_t r = 0; r < addresses.size(); ++r)
      if (addresses[r] == address && static_cast<int64_t>(r) != self) out.push_back(static_cast<int64_t>(r));
    return out;
  }
  std::string rank_at(int64_t rank) const { return "rank " + std::to_string(rank) + " (" + addresses[rank] + ")"; }
  // Names the rank after each "[address]:port" of a c10d message (dropping
  // Gloo's "$<sequence>" suffix); when the message names no known peer, lists
  // the other ranks (up to four).
  std::string annotate(const std::string& message) const;
};

// The TCPStore: rank 0 hosts it (torchrun's agent does under
// TORCHELASTIC_USE_AGENT_STORE). A client that reaches a store whose rendezvous
// is already complete has found the previous attempt's master, still shutting
// down after a launcher restart on another node: it waits for the new one.
c10::intrusive_ptr<c10d::Store> make_store(const DistributedEnv& e, const DistributedConfig& config,
                                           Clock::time_point deadline);

// Every rank publishes its address (with how many Gloo devices it has and the
// port of its reachability listener, 0 for none) and waits for all others until
// the deadline; one that never came is named (with its node when every node runs
// LOCAL_WORLD_SIZE ranks).
std::shared_ptr<const Peers> join(c10d::Store& store, const DistributedEnv& e, const std::string& address,
                                  int64_t devices, int probe_port, Clock::time_point deadline, int64_t timeout_s);

// Ranks on other hosts cannot reach a loopback address. Before connecting
// (`failed` false) that is only certain when some ranks advertise one and
// others do not; once Gloo failed, any loopback address is suspect. "" if none.
std::string loopback_hint(const Peers& peers, bool failed);

// Gloo connects each pair of ranks once, from the one with the larger address;
// when that connection cannot be made (a firewall that drops packets, an address
// routed nowhere) it retries for about five times distributed.timeout_s and then
// names no one. Each rank first connects where Gloo will, to the peer's
// reachability listener (network.h), and names the peer it cannot reach by the deadline.
void check_reachable(const Peers& peers, Clock::time_point deadline, int64_t timeout_s);

}  // namespace segtrain::trainer::rendezvous
