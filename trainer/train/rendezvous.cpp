#include "trainer/train/rendezvous.h"

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <regex>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "trainer/train/network.h"

namespace segtrain::trainer::rendezvous {
namespace {

std::string master_text(const DistributedEnv& e) { return e.master_addr + ":" + std::to_string(e.master_port); }

std::chrono::milliseconds left(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

// Rendezvous keys (beside c10d's own): each rank's address, and rank 0's mark
// that everybody arrived.
std::string joined_key(int64_t rank) { return "segtrain/joined/" + std::to_string(rank); }
const std::string kComplete = "segtrain/complete";

}  // namespace

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

std::string debug_detail(const std::exception& err) {
  return log::enabled(log::Level::debug) ? std::string("\n") + err.what() : "";
}

std::string ranks_text(const std::vector<int64_t>& ranks, size_t shown) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size() && i < shown; ++i)
    out += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  if (ranks.size() > shown) out += " and " + std::to_string(ranks.size() - shown) + " more";
  return out;
}

QuietC10Log::QuietC10Log() : saved_(FLAGS_caffe2_log_level) {
  if (!log::enabled(log::Level::debug)) FLAGS_caffe2_log_level = std::max(saved_, 3);
}

QuietC10Log::~QuietC10Log() { FLAGS_caffe2_log_level = saved_; }

std::string Peers::annotate(const std::string& message) const {
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
      // Rank 0 hosts the store: a port something else holds is the likely cause, not a missing peer.
      if (options.isServer && message_of(err).find("EADDRINUSE") != std::string::npos)
        throw InputError("MASTER_PORT=" + std::to_string(e.master_port) +
                         ": rank 0 cannot host the rendezvous store on this port: it is in use (another job, or an "
                         "old rank 0 still running?): " + message_of(err) + debug_detail(err));
      if (options.isServer)
        throw InputError("MASTER_ADDR/MASTER_PORT: rank 0 cannot host the rendezvous store at " + master_text(e) +
                         ": " + message_of(err) + debug_detail(err));
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

}  // namespace segtrain::trainer::rendezvous
