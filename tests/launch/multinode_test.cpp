// Two nodes, not two processes on one host: two network namespaces joined by a
// veth pair (10.231.<random>.1 and .2), one `segtrain-launch --nnodes 2` in
// each. Gloo must bind the address that reaches the master (or the interface
// GLOO_SOCKET_IFNAME names), never 127.0.0.1. Needs root and iproute2's `ip`;
// skipped with a message otherwise. The namespaces are the test's own and are
// removed in TearDown; the host's interfaces and routes are never touched.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <thread>

#include "common/error.h"
#include "test_util.h"
#include "trainer/train/network.h"

namespace segtrain {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::kBin;
using test::kLaunch;
using test::run;

// --- the address helpers, on this host -----------------------------------------

TEST(Network, LoopbackMasterIsReachedFromLoopback) {
  EXPECT_EQ(trainer::local_address_towards("127.0.0.1", 29500, "MASTER_ADDR=127.0.0.1"), "127.0.0.1");
  EXPECT_TRUE(trainer::is_loopback_address(trainer::local_address_towards("localhost", 29500, "MASTER_ADDR")));
  EXPECT_TRUE(trainer::is_loopback_address("127.0.1.1"));
  EXPECT_TRUE(trainer::is_loopback_address("::1"));
  EXPECT_FALSE(trainer::is_loopback_address("10.231.8.1"));
  EXPECT_FALSE(trainer::is_loopback_address("not an address"));
}

TEST(Network, UnknownNamesAndInterfacesAreInputErrorsNamingWhat) {
  try {
    trainer::local_address_towards("no-such-host.invalid", 29500, "MASTER_ADDR=no-such-host.invalid");
    FAIL() << "resolved a .invalid name";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR=no-such-host.invalid: cannot resolve"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(trainer::interface_address("lo", "GLOO_SOCKET_IFNAME=lo"), "127.0.0.1");
  try {
    trainer::interface_address("nosuch0", "GLOO_SOCKET_IFNAME=nosuch0");
    FAIL() << "found interface nosuch0";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("GLOO_SOCKET_IFNAME=nosuch0: no network interface 'nosuch0' on this host "
                                         "(interfaces: lo 127.0.0.1"),
              std::string::npos)
        << e.what();
  }
}

// Gloo's rule (Device::isInitiator): the larger address, byte by byte, connects.
TEST(Network, GlooConnectsFromTheLargerAddress) {
  EXPECT_TRUE(trainer::gloo_connects_to("10.231.8.2", "10.231.8.1"));
  EXPECT_FALSE(trainer::gloo_connects_to("10.231.8.1", "10.231.8.2"));
  EXPECT_TRUE(trainer::gloo_connects_to("10.0.0.10", "10.0.0.9"));  // bytes, not text
  EXPECT_FALSE(trainer::gloo_connects_to("10.0.0.9", "10.0.0.10"));
  EXPECT_FALSE(trainer::gloo_connects_to("10.0.0.1", "10.0.0.1"));  // one host: Gloo compares ports
  EXPECT_TRUE(trainer::gloo_connects_to("fe80::2", "fe80::1"));
  EXPECT_FALSE(trainer::gloo_connects_to("10.0.0.1", "::1"));
}

TEST(Network, AListenerIsReachedAndAClosedPortIsRefused) {
  const auto soon = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int closed_port = 0;
  {
    const trainer::ReachabilityListener listener("127.0.0.1");
    ASSERT_GT(listener.port(), 0);
    EXPECT_EQ(trainer::try_connect("127.0.0.1", listener.port(), soon), "");
    closed_port = listener.port();
  }
  EXPECT_EQ(trainer::try_connect("127.0.0.1", closed_port, soon), "Connection refused");
  EXPECT_EQ(trainer::try_connect("not an address", 1, soon), "'not an address' is not an IP address");
}

// --- segtrain across two network namespaces ------------------------------------

// A small corpus and tiny model, as in train_cli_test.
class TwoNodes : public test::SyntheticStoreSuite {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) SKIP_NOT_APPLICABLE("network namespaces need root (ip netns add); not root here");
    if (run("ip", {"-V"}).exit_code != 0) SKIP_NOT_APPLICABLE("no `ip` command (Debian package iproute2)");
    std::random_device rd;
    const unsigned tag = rd();
    subnet_ = "10.231." + std::to_string(tag % 256);
    const std::string base = "segtrain-" + std::to_string(::getpid()) + "-" + std::to_string(tag % 100000);
    ns_ = {base + "-a", base + "-b"};
    for (const auto& ns : ns_) {
      auto add = run("ip", {"netns", "add", ns});
      if (add.exit_code != 0) {
        TearDown();
        SKIP_NOT_APPLICABLE("cannot create a network namespace (ip netns add " << ns << "): " << add.err);
      }
      created_.push_back(ns);
    }
    // Both ends are created inside the namespaces: nothing appears on the host.
    const std::vector<std::vector<std::string>> steps = {
        {"link", "add", "name", kIface[0], "netns", ns_[0], "type", "veth", "peer", "name", kIface[1], "netns", ns_[1]},
        {"-n", ns_[0], "addr", "add", address(0) + "/24", "dev", kIface[0]},
        {"-n", ns_[1], "addr", "add", address(1) + "/24", "dev", kIface[1]},
        {"-n", ns_[0], "link", "set", kIface[0], "up"},
        {"-n", ns_[1], "link", "set", kIface[1], "up"},
        {"-n", ns_[0], "link", "set", "lo", "up"},
        {"-n", ns_[1], "link", "set", "lo", "up"}};
    for (const auto& step : steps) {
      auto r = run("ip", step);
      ASSERT_EQ(r.exit_code, 0) << "ip " << step[0] << " " << step[1] << " " << step[2] << ": " << r.err;
    }
  }

  // Every process was started through test::run, under `timeout -s KILL`.
  void TearDown() override {
    for (const auto& ns : created_) run("ip", {"netns", "del", ns});  // removes the veth pair with it
    created_.clear();
  }

  std::string address(int node) const { return subnet_ + "." + std::to_string(node + 1); }

  std::string config(const std::string& name) { return tiny_run_config(name, {.run_keys = ", log_all_ranks: true"}); }

  // `ip netns exec <node's namespace> [env VARS...] segtrain-launch --nnodes 2 ... -- segtrain train CFG SETS...`
  std::vector<std::string> node_args(int node, const std::vector<std::string>& vars, int max_restarts,
                                     const std::string& cfg, const std::vector<std::string>& sets) {
    std::vector<std::string> a = {"netns", "exec", ns_[node], "env"};
    a.insert(a.end(), vars.begin(), vars.end());
    for (const std::string& s : {kLaunch, std::string("--nnodes"), std::string("2"), std::string("--node-rank"),
                                 std::to_string(node), std::string("--nproc-per-node"), std::string("1"),
                                 std::string("--master-addr"), address(0), std::string("--master-port"),
                                 std::string("29500"), std::string("--max-restarts"), std::to_string(max_restarts),
                                 std::string("--"), kBin, std::string("train"), cfg})
      a.push_back(s);
    a.insert(a.end(), sets.begin(), sets.end());
    return a;
  }

  // Both nodes at once; node 1 names its interface with GLOO_SOCKET_IFNAME,
  // node 0 finds the address that reaches the master itself.
  std::pair<test::RunResult, test::RunResult> run_two_nodes(const std::string& cfg,
                                                            const std::vector<std::string>& sets, int max_restarts = 0) {
    test::RunResult node1;
    std::thread second([&] {
      node1 = run("ip", node_args(1, {"GLOO_SOCKET_IFNAME=" + std::string(kIface[1])}, max_restarts, cfg, sets), 300);
    });
    auto node0 = run("ip", node_args(0, {}, max_restarts, cfg, sets), 300);
    second.join();
    return {node0, node1};
  }

  static std::vector<double> values(const std::string& run, const std::string& key) {
    std::vector<double> out;
    std::istringstream lines(test::read_file(fs::path(run) / "metrics.jsonl"));
    for (std::string line; std::getline(lines, line);) out.push_back(json::parse(line)[key].get<double>());
    return out;
  }
  static std::string checksum(const std::string& log) {
    std::smatch m;
    const std::string text = test::read_file(log);
    return std::regex_search(text, m, std::regex("final parameter checksum (\\S+)")) ? m[1].str() : "missing";
  }

  static constexpr const char* kIface[2] = {"segt0", "segt1"};
  std::string subnet_;
  std::vector<std::string> ns_, created_;
};

// The worker (not the launcher) training `cfg` whose environment has RANK=<rank>.
pid_t find_worker(const std::string& cfg, int rank) {
  const std::string var = std::string("\0RANK=", 6) + std::to_string(rank) + std::string("\0", 1);
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = test::read_file(e.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.rfind(kBin + " train " + cfg + " ", 0) == 0 &&
        test::read_file(e.path() / "environ").find(var) != std::string::npos)
      return static_cast<pid_t>(std::stol(name));
  }
  return -1;
}

// (a) The 2-node run (micro-batch 2 on each node) equals one process with
// micro-batch 4; (b) SIGKILLing node 1's worker mid-run makes both launchers
// restart their workers, which resume from the newest checkpoint and end
// exactly where the uninterrupted 2-node run ends.
TEST_F(TwoNodes, TwoNodesEqualOneProcessAndSurviveAKilledWorker) {
  const std::vector<std::string> budget = {"--set", "train.budget.tokens=16000"};
  std::vector<std::string> single_args = {"train", config("single")};
  single_args.insert(single_args.end(), budget.begin(), budget.end());
  auto single = run(kBin, single_args);
  ASSERT_EQ(single.exit_code, 0) << single.err;

  std::vector<std::string> sets = budget;
  for (const char* s : {"train.micro_batch_size=2", "train.checkpoint_every=10", "distributed.timeout_s=20"})
    sets.push_back("--set"), sets.push_back(s);
  auto [node0, node1] = run_two_nodes(config("whole"), sets);
  ASSERT_EQ(node0.exit_code, 0) << node0.err << "\n--- node 1:\n" << node1.err;
  ASSERT_EQ(node1.exit_code, 0) << node1.err << "\n--- node 0:\n" << node0.err;
  // Each node advertised its veth address, not 127.0.0.1.
  const std::string log0 = test::read_file(run_dir("whole") + "/logs/rank-0.log"),
                    log1 = test::read_file(run_dir("whole") + "/logs/rank-1.log");
  EXPECT_NE(log0.find("Gloo binds " + address(0) + " (the local address that reaches MASTER_ADDR=" + address(0) + ")"),
            std::string::npos)
      << log0;
  EXPECT_NE(log1.find("Gloo binds " + address(1) + " (GLOO_SOCKET_IFNAME=" + kIface[1] + ")"), std::string::npos)
      << log1;

  auto a = values(run_dir("single"), "loss"), b = values(run_dir("whole"), "loss");
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GT(a.size(), 30u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << "step " << i + 1;
  const std::string rank0 = checksum(run_dir("whole") + "/logs/rank-0.log");
  ASSERT_NE(rank0, "missing");
  EXPECT_EQ(rank0, checksum(run_dir("whole") + "/logs/rank-1.log")) << "the nodes ended with different weights";
  EXPECT_NEAR(std::stod(rank0), std::stod(checksum(run_dir("single") + "/logs/rank-0.log")), 1e-3);

  // The same run again; node 1's worker is SIGKILLed once a checkpoint exists.
  std::pair<test::RunResult, test::RunResult> killed;
  std::atomic<bool> done = false;
  std::thread nodes([&] {
    killed = run_two_nodes(config("killed"), sets, 1);
    done = true;
  });
  const std::string metrics = run_dir("killed") + "/metrics.jsonl";
  pid_t victim = -1;
  for (int i = 0; i < 12000 && !done; ++i) {
    const std::string text = test::read_file(metrics);
    if (std::count(text.begin(), text.end(), '\n') >= 15 && fs::exists(run_dir("killed") + "/checkpoints/step-10")) {
      victim = find_worker(config_path("killed"), 1);
      if (victim > 0) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (victim > 0) ::kill(victim, SIGKILL);
  nodes.join();
  ASSERT_GT(victim, 0) << "no rank-1 worker found while the run was going\n" << killed.first.err;
  EXPECT_EQ(killed.first.exit_code, 0) << killed.first.err << "\n--- node 1:\n" << killed.second.err;
  EXPECT_EQ(killed.second.exit_code, 0) << killed.second.err << "\n--- node 0:\n" << killed.first.err;
  EXPECT_NE(killed.second.err.find("rank 1 was killed by signal 9; restarting all workers (1 of 1)"), std::string::npos)
      << killed.second.err;
  EXPECT_NE(killed.first.err.find("rank 0 exited with code 1; restarting all workers (1 of 1)"), std::string::npos)
      << killed.first.err;
  // Node 0's worker said which peer failed, on one line without C++ frames.
  EXPECT_TRUE(std::regex_search(killed.first.err, std::regex("\\[0\\]: segtrain train: error: distributed: .*rank 1")))
      << killed.first.err;
  EXPECT_EQ(killed.first.err.find("frame #"), std::string::npos) << killed.first.err;
  const std::string resumed = test::read_file(run_dir("killed") + "/logs/rank-1.log");
  EXPECT_NE(resumed.find("resuming from"), std::string::npos) << resumed;
  EXPECT_EQ(values(run_dir("killed"), "loss"), values(run_dir("whole"), "loss"));
  EXPECT_EQ(test::read_file(run_dir("killed") + "/final/model.safetensors"),
            test::read_file(run_dir("whole") + "/final/model.safetensors"));
}

// (c) Only node 0 is started: its worker gives up after distributed.timeout_s
// with one line naming the rank (and node) that never came, and no C++ frames.
TEST_F(TwoNodes, ANodeThatNeverArrivesIsNamedWithinTheTimeout) {
  const int timeout_s = 10;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::string> sets = {"--set", "distributed.timeout_s=" + std::to_string(timeout_s)};
  auto node0 = run("ip", node_args(0, {}, 0, config("alone"), sets), 120);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(node0.signaled) << node0.err;
  EXPECT_NE(node0.exit_code, 0) << node0.err;
  EXPECT_GE(seconds, timeout_s - 1) << node0.err;
  EXPECT_LT(seconds, timeout_s + 15) << "took " << seconds << " s\n" << node0.err;
  const std::string expected = "[0]: segtrain train: error: distributed: rank 1 (node 1) of 2 never joined the "
                               "rendezvous at " + address(0) + ":29500 within " + std::to_string(timeout_s) +
                               " s (distributed.timeout_s); rank 0 gives up\n";
  EXPECT_NE(node0.err.find(expected), std::string::npos) << node0.err;
  EXPECT_EQ(node0.err.find("frame #"), std::string::npos) << node0.err;
  EXPECT_EQ(node0.err.find("Exception raised from"), std::string::npos) << node0.err;
  std::smatch m;
  std::string rest = node0.err;
  int error_lines = 0;
  for (std::regex line("\\[0\\]: segtrain train: error:"); std::regex_search(rest, m, line); rest = m.suffix())
    ++error_lines;
  EXPECT_EQ(error_lines, 1) << node0.err;
}

// (d) Both nodes join the rendezvous, but node 1's Gloo address (GLOO_SOCKET_IFNAME
// on an interface of its own) is routed from node 0 through a third namespace that
// forwards nothing: packets vanish, as behind a firewall that drops them. Node 0
// (the larger address, so the side Gloo makes connect) names rank 1 and its address
// within distributed.timeout_s; Gloo alone retried for about five times that.
TEST_F(TwoNodes, APeerThatCannotBeReachedIsNamedWithinTheTimeout) {
  const std::string tag = subnet_.substr(subnet_.rfind('.') + 1);
  const std::string router = ns_[0] + "-r", gloo_net = "10.230." + tag, router_net = "10.232." + tag;
  ASSERT_EQ(run("ip", {"netns", "add", router}).exit_code, 0);
  created_.push_back(router);
  const std::vector<std::vector<std::string>> steps = {
      {"link", "add", "name", "segr0", "netns", ns_[0], "type", "veth", "peer", "name", "segr1", "netns", router},
      {"link", "add", "name", "segg1", "netns", ns_[1], "type", "veth", "peer", "name", "segg0", "netns", router},
      {"-n", ns_[0], "addr", "add", router_net + ".1/24", "dev", "segr0"},
      {"-n", router, "addr", "add", router_net + ".2/24", "dev", "segr1"},
      {"-n", ns_[1], "addr", "add", gloo_net + ".2/24", "dev", "segg1"},
      {"-n", router, "addr", "add", gloo_net + ".1/24", "dev", "segg0"},
      {"-n", ns_[0], "link", "set", "segr0", "up"},
      {"-n", router, "link", "set", "segr1", "up"},
      {"-n", ns_[1], "link", "set", "segg1", "up"},
      {"-n", router, "link", "set", "segg0", "up"},
      {"-n", ns_[0], "route", "add", gloo_net + ".0/24", "via", router_net + ".2"}};
  for (const auto& step : steps) {
    auto r = run("ip", step);
    ASSERT_EQ(r.exit_code, 0) << "ip " << step[0] << " " << step[1] << " " << step[2] << ": " << r.err;
  }
  // A new namespace does not forward; said explicitly, as the test depends on it.
  auto no_forwarding = run("ip", {"netns", "exec", router, "sh", "-c", "echo 0 > /proc/sys/net/ipv4/ip_forward"});
  ASSERT_EQ(no_forwarding.exit_code, 0) << no_forwarding.err;

  const int timeout_s = 10;
  const std::vector<std::string> sets = {"--set", "distributed.timeout_s=" + std::to_string(timeout_s)};
  const std::string cfg = config("unreachable");
  const auto start = std::chrono::steady_clock::now();
  test::RunResult node1;
  std::thread second([&] { node1 = run("ip", node_args(1, {"GLOO_SOCKET_IFNAME=segg1"}, 0, cfg, sets), 300); });
  auto node0 = run("ip", node_args(0, {}, 0, cfg, sets), 300);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  second.join();
  EXPECT_EQ(node0.exit_code, 1) << node0.err;
  EXPECT_NE(node1.exit_code, 0) << node1.err;
  EXPECT_LT(seconds, timeout_s + 15) << "took " << seconds << " s\n" << node0.err;
  const std::string expected = "[0]: segtrain train: error: distributed: rank 0 (" + address(0) +
                               ") cannot reach rank 1 (" + gloo_net + ".2) at the address it advertises within " +
                               std::to_string(timeout_s) + " s (distributed.timeout_s): no answer (connection timed "
                               "out); every rank connects to the others' addresses (set GLOO_SOCKET_IFNAME on rank "
                               "1's node to an interface the other nodes reach)\n";
  EXPECT_NE(node0.err.find(expected), std::string::npos) << node0.err;
  EXPECT_EQ(node0.err.find("frame #"), std::string::npos) << node0.err;
}

// GLOO_SOCKET_IFNAME naming an interface this node does not have: exit 2, one
// line naming the variable and the interface. No namespace needed.
TEST(GlooSocketIfname, AMissingInterfaceExitsTwoNamingIt) {
  test::TempDir dir;
  test::make_store_stub(dir.path() / "store");
  const std::string cfg = dir / "run.yaml";
  test::write_file(cfg, "run: {name: ifname, output_dir: " + (dir / "run") + "}\n"
                        "model: {arch: gpt_neox, d_model: 32, n_layers: 2, n_heads: 4}\n"
                        "data: {store: " + (dir / "store") + ", train_length: 32, extended_length: 128}\n"
                        "eval: {lengths: [32]}\n");
  const std::string port = std::to_string(test::unused_port());
  auto r = run("env", {"GLOO_SOCKET_IFNAME=nosuch0", "WORLD_SIZE=2", "RANK=0", "MASTER_ADDR=127.0.0.1",
                       "MASTER_PORT=" + port, kBin, "train", cfg, "--set", "distributed.timeout_s=5"},
               60);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("segtrain train: error: GLOO_SOCKET_IFNAME=nosuch0: no network interface 'nosuch0' on this "
                       "host (interfaces: lo"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

}  // namespace
}  // namespace segtrain
