#pragma once
// Helpers shared by the test suites: temporary directories, files, and running
// the real `segtrain` binary the way a user does.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "test_paths.h"

// Skips the calling test because it does not apply on this machine, saying why (no root, no CUDA
// device, a package not installed). The only skip ctest reports as "Skipped": its text is the
// tests' SKIP_REGULAR_EXPRESSION (tests/CMakeLists.txt), and any other "[  SKIPPED ]" (GoogleTest
// prints one for every test of a suite whose set-up failed) is Failed (tests/discover_tests.cmake).
#define SKIP_NOT_APPLICABLE(why) GTEST_SKIP() << "not applicable here: " << why

namespace segtrain::test {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("segtrain-test-" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

inline void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The first of `count` consecutive TCP ports that nothing holds now, for a test's
// rendezvous (MASTER_PORT, --master-port, --rdzv-endpoint). Drawn at random below the
// kernel's ephemeral range (32768 and up on Linux), where outgoing connections (other
// tests' Gloo pairs) take their local ports, and checked by binding each one: a
// port derived from the pid alone once collided with such a connection in CI.
inline int unused_port(int count = 1) {
  auto bindable = [](int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return false;
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    address.sin_port = htons(static_cast<uint16_t>(port));
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    ::close(fd);
    return ok;
  };
  static std::mt19937 draw{std::random_device{}()};
  std::uniform_int_distribution<int> base(20000, 32767 - count);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int first = base(draw);
    bool all = true;
    for (int p = first; all && p < first + count; ++p) all = bindable(p);
    if (all) return first;
  }
  throw std::runtime_error("no " + std::to_string(count) + " consecutive free TCP ports in 20000-32767");
}

struct RunResult {
  int exit_code = -1;
  bool signaled = false;  // died from a signal (a crash) or hit the timeout
  std::string out;
  std::string err;
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `program args...` under a timeout so a hang fails the test instead of CI.
inline RunResult run(const std::string& program, const std::vector<std::string>& args, int timeout_s = 120) {
  TempDir io;
  std::string command = "timeout -s KILL " + std::to_string(timeout_s) + " " + shell_quote(program);
  for (const auto& a : args) command += " " + shell_quote(a);
  command += " >" + shell_quote(io / "out") + " 2>" + shell_quote(io / "err") + " </dev/null";
  int status = std::system(command.c_str());
  RunResult result;
  result.out = read_file(io / "out");
  result.err = read_file(io / "err");
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
    // timeout(1) reports a killed child as 137; the shell reports signals as 128+n.
    result.signaled = result.exit_code == 137 || (result.exit_code > 128 && result.exit_code != 130 &&
                                                   result.exit_code != 143);
  } else {
    result.signaled = true;
  }
  return result;
}

// The message of the InputError `fn` throws, or "(no InputError)" when it throws none.
inline std::string input_error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

// The smallest directory that config validation accepts as a token store.
inline void make_store_stub(const fs::path& dir) {
  write_file(dir / "meta.json", "{\"vocab_size\": 64}\n");
}

// The binaries of this build, for the suites that run them: SEGTRAIN_BIN and SEGTRAIN_LAUNCH_BIN
// (tests/test_paths.h).
// SEGTRAIN_TEST_BIN replaces the first: the harness test (tests/harness_test.sh)
// proves with a binary that cannot run that a suite whose set-up fails is failed.
#ifdef SEGTRAIN_BIN
inline const std::string kBin = [] {
  const char* replaced = std::getenv("SEGTRAIN_TEST_BIN");
  return std::string(replaced && *replaced ? replaced : SEGTRAIN_BIN);
}();

// What a run of SyntheticStoreSuite::tiny_run_config may change from the tiny run.
struct TinyRun {
  std::string arch = "gpt_neox";
  std::string method = "chunk";  // the sampler's, with alpha 0.25
  std::string run_keys = "";     // more keys of `run:`, each ", key: value"
  std::string train_keys = "";   // more keys of `train:`, each ", key: value"
  std::string eval_lengths = "[32]";
};

// A suite whose tests share one corpus and token store, made once per suite the way a
// user makes them: `segtrain synth` (40 documents of 700 to 1,200 tokens, seed 5) into
// dir_/corpus, then `segtrain prepare` (a vocabulary of 160) into dir_/store; and the
// short runs of a tiny model they train on it.
class SyntheticStoreSuite : public ::testing::Test {
 protected:
  // The config file of run `name`, written to config_path(name): a 2-layer, 4-head model
  // of d_model 32 trained at L_t = 32 from L_e = 128 windows of the store, 4 sequences
  // a micro-batch, logging every step, no checkpoints or TensorBoard; output in run_dir(name).
  static std::string tiny_run_config(const std::string& name, const TinyRun& tiny = {}) {
    const std::string path = config_path(name);
    write_file(path, "run: {name: " + name + ", output_dir: " + run_dir(name) + ", threads: 1" + tiny.run_keys +
                         "}\n"
                         "model: {arch: " + tiny.arch + ", d_model: 32, n_layers: 2, n_heads: 4}\n"
                         "data:\n  store: " + (*dir_ / "store") +
                         "\n  train_length: 32\n  extended_length: 128\n  sampler: {method: " + tiny.method +
                         ", alpha: 0.25}\n"
                         "train: {micro_batch_size: 4, lr: 3.0e-3, warmup_steps: 5, log_every: 1,"
                         " checkpoint_every: 0, tensorboard: false" + tiny.train_keys + "}\n"
                         "eval: {lengths: " + tiny.eval_lengths + ", max_sequences: 4}\n");
    return path;
  }
  static std::string config_path(const std::string& name) { return *dir_ / (name + ".yaml"); }
  static std::string run_dir(const std::string& name) { return *dir_ / ("runs/" + name); }

  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto synth = run(kBin, {"synth", "--out", *dir_ / "corpus", "--docs", "40", "--min-tokens", "700",
                            "--max-tokens", "1200", "--seed", "5"});
    ASSERT_EQ(synth.exit_code, 0) << synth.err;
    auto prepare = run(kBin, {"prepare", "--input", *dir_ / "corpus/train.jsonl", *dir_ / "corpus/valid.jsonl",
                              "--out", *dir_ / "store", "--vocab-size", "160"});
    ASSERT_EQ(prepare.exit_code, 0) << prepare.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static inline TempDir* dir_ = nullptr;
};
#endif
// Two ranks run as `env ARGS...` (each list starts with its environment): rank 1
// is SIGKILLed (no handler runs) once rank 0's `metrics` has `lines` lines, or
// after `wait_s`. Rank 0's result, and the seconds from the kill to its end.
struct KilledPeerRun {
  RunResult survivor;
  bool killed_while_running = false;  // rank 0 had not ended when rank 1 was killed
  double seconds_after_kill = 0;
};
inline KilledPeerRun run_and_kill_rank1(const std::vector<std::string>& rank0, std::vector<std::string> rank1,
                                        const std::string& metrics, int lines, int wait_s) {
  const pid_t victim = fork();  // `env` execs segtrain in the same process
  if (victim == 0) {
    std::vector<char*> argv = {const_cast<char*>("env")};
    for (auto& a : rank1) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (!freopen("/dev/null", "w", stderr)) _exit(126);
    execvp("env", argv.data());
    _exit(127);
  }
  KilledPeerRun out;
  std::atomic<bool> done = false;
  std::thread first([&] {
    out.survivor = run("env", rank0, 900);
    done = true;
  });
  for (int i = 0; i < wait_s * 100 && !done; ++i) {
    const std::string text = read_file(metrics);
    if (std::count(text.begin(), text.end(), '\n') >= lines) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  out.killed_while_running = !done;
  kill(victim, SIGKILL);
  const auto killed_at = std::chrono::steady_clock::now();
  int status = 0;
  waitpid(victim, &status, 0);
  first.join();
  out.seconds_after_kill = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  return out;
}

#ifdef SEGTRAIN_LAUNCH_BIN
inline const std::string kLaunch = SEGTRAIN_LAUNCH_BIN;

// The pid of the worker whose environment has `rank_var` and whose command line
// mentions `needle`, found through /proc (the launcher's children).
inline pid_t find_worker(const std::string& needle, const std::string& rank_var) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = test::read_file(e.path() / "cmdline"), environ = test::read_file(e.path() / "environ");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(needle) != std::string::npos && cmdline.find(" train ") != std::string::npos &&
        environ.find(std::string("\0", 1) + rank_var + std::string("\0", 1)) != std::string::npos &&
        cmdline.find("segtrain-launch") == std::string::npos && cmdline.rfind("env ", 0) != 0)
      return static_cast<pid_t>(std::stol(name));
  }
  return -1;
}
#endif

}  // namespace segtrain::test
