// segtrain-launch: a torchrun-compatible launcher (C++ standard library and
// POSIX only). It starts one worker per local rank with the environment torchrun
// sets, prefixes each line a worker prints with its rank, forwards SIGINT and
// SIGTERM, and when a worker fails tears all of them down and starts them again
// (TORCHELASTIC_RESTART_COUNT + 1) up to --max-restarts times; `segtrain train`
// then resumes from its newest checkpoint.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr const char* kUsage =
    "usage: segtrain-launch [--nproc-per-node N] [--nnodes N --node-rank R --master-addr A --master-port P]\n"
    "                       [--max-restarts K] [--standalone] [--run-id ID] [--no-python] [--] CMD...\n"
    "\n"
    "Starts CMD once per local rank with the environment torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK,\n"
    "LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_*), prefixes each rank's output\n"
    "with [rank], forwards SIGINT/SIGTERM, and restarts all workers when one fails, up to --max-restarts\n"
    "times (segtrain train resumes from its newest checkpoint on a restart); a worker that exits 2 (its input\n"
    "or configuration is wrong) is not restarted. Exits with the failed worker's code.\n";

struct Options {
  int nproc = 1, nnodes = 1, node_rank = 0, max_restarts = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string run_id = "none";
  bool standalone = false;
  std::vector<std::string> command;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "segtrain-launch: error: " << message << "\n" << kUsage;
  std::exit(2);
}

int to_int(const std::string& flag, const std::string& text, int min, int max) {
  try {
    size_t used = 0;
    const long v = std::stol(text, &used);
    if (used == text.size() && v >= min && v <= max) return static_cast<int>(v);
  } catch (const std::exception&) {
  }
  usage_error(flag + " " + text + ": expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
}

Options parse(int argc, char** argv) {
  Options o;
  int i = 1;
  auto value = [&](const std::string& flag) -> std::string {
    if (i + 1 >= argc) usage_error(flag + " needs a value");
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string a = argv[i];
    std::string inline_value;
    if (a.rfind("--", 0) == 0 && a.find('=') != std::string::npos) {
      inline_value = a.substr(a.find('=') + 1);
      a = a.substr(0, a.find('='));
    }
    auto get = [&](const std::string& flag) { return inline_value.empty() ? value(flag) : inline_value; };
    if (a == "--") {
      ++i;
      break;
    } else if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      std::exit(0);
    } else if (a == "--nproc-per-node" || a == "--nproc_per_node") {
      o.nproc = to_int(a, get(a), 1, 1024);
    } else if (a == "--nnodes") {
      o.nnodes = to_int(a, get(a), 1, 100000);
    } else if (a == "--node-rank" || a == "--node_rank") {
      o.node_rank = to_int(a, get(a), 0, 99999);
    } else if (a == "--master-addr" || a == "--master_addr") {
      o.master_addr = get(a);
    } else if (a == "--master-port" || a == "--master_port") {
      o.master_port = to_int(a, get(a), 1, 65535);
    } else if (a == "--max-restarts" || a == "--max_restarts") {
      o.max_restarts = to_int(a, get(a), 0, 1000);
    } else if (a == "--run-id" || a == "--run_id") {
      o.run_id = get(a);
    } else if (a == "--standalone") {
      o.standalone = true;
    } else if (a == "--no-python" || a == "--no_python") {
      // torchrun's flag for launching a binary: segtrain-launch always does.
    } else if (a.rfind("-", 0) == 0) {
      usage_error("unknown option " + a);
    } else {
      break;
    }
  }
  for (; i < argc; ++i) o.command.push_back(argv[i]);
  if (o.command.empty()) usage_error("no command to launch");
  if (o.node_rank >= o.nnodes)
    usage_error("--node-rank " + std::to_string(o.node_rank) + " is not below --nnodes " + std::to_string(o.nnodes));
  if (o.standalone) {
    if (o.nnodes != 1) usage_error("--standalone runs a single node; drop --nnodes");
    o.master_addr = "127.0.0.1";
    o.master_port = 20000 + static_cast<int>(::getpid() % 30000);  // a private port for this job
  }
  return o;
}

volatile sig_atomic_t g_signal = 0;
extern "C" void on_signal(int s) { g_signal = s; }

struct Worker {
  pid_t pid = -1;
  int out = -1, err = -1;  // read ends of the worker's stdout and stderr
  std::string out_rest, err_rest;
  int rank = 0;
  bool running = false;
  int status = 0;
};

Worker spawn(const Options& o, int local_rank, int attempt) {
  int out_pipe[2], err_pipe[2];
  if (::pipe(out_pipe) != 0 || ::pipe(err_pipe) != 0) {
    std::perror("segtrain-launch: pipe");
    std::exit(1);
  }
  Worker w;
  w.rank = o.node_rank * o.nproc + local_rank;
  w.pid = ::fork();
  if (w.pid == 0) {
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    ::close(out_pipe[0]), ::close(err_pipe[0]), ::close(out_pipe[1]), ::close(err_pipe[1]);
    const std::map<std::string, std::string> env = {
        {"RANK", std::to_string(w.rank)},
        {"WORLD_SIZE", std::to_string(o.nnodes * o.nproc)},
        {"LOCAL_RANK", std::to_string(local_rank)},
        {"LOCAL_WORLD_SIZE", std::to_string(o.nproc)},
        {"GROUP_RANK", std::to_string(o.node_rank)},
        {"ROLE_RANK", std::to_string(w.rank)},
        {"ROLE_WORLD_SIZE", std::to_string(o.nnodes * o.nproc)},
        {"MASTER_ADDR", o.master_addr},
        {"MASTER_PORT", std::to_string(o.master_port)},
        {"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt)},
        {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts)},
        {"TORCHELASTIC_RUN_ID", o.run_id},
        {"TORCHELASTIC_USE_AGENT_STORE", "False"}};
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    // As torchrun: one intra-op thread per worker unless the user chose otherwise.
    if (o.nproc > 1 && !std::getenv("OMP_NUM_THREADS")) ::setenv("OMP_NUM_THREADS", "1", 1);
    ::signal(SIGINT, SIG_DFL), ::signal(SIGTERM, SIG_DFL);
    std::vector<char*> argv;
    for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::cerr << "segtrain-launch: cannot run '" << o.command[0] << "': " << std::strerror(errno) << "\n";
    ::_exit(127);
  }
  ::close(out_pipe[1]), ::close(err_pipe[1]);
  w.out = out_pipe[0];
  w.err = err_pipe[0];
  w.running = true;
  return w;
}

// Copies complete lines from `fd` to `sink`, each prefixed with the rank.
bool pump(int fd, std::string& rest, int rank, std::ostream& sink) {
  char buffer[4096];
  const ssize_t n = ::read(fd, buffer, sizeof(buffer));
  if (n <= 0) {
    if (!rest.empty()) sink << "[" << rank << "]: " << rest << "\n" << std::flush, rest.clear();
    return false;
  }
  rest.append(buffer, static_cast<size_t>(n));
  size_t start = 0;
  for (size_t nl; (nl = rest.find('\n', start)) != std::string::npos; start = nl + 1)
    sink << "[" << rank << "]: " << rest.substr(start, nl - start) << "\n";
  rest.erase(0, start);
  sink << std::flush;
  return true;
}

void signal_all(std::vector<Worker>& workers, int sig) {
  for (auto& w : workers)
    if (w.running) ::kill(w.pid, sig);
}

// Runs one attempt; returns 0 when every worker succeeded, else describes the failure.
int run_attempt(const Options& o, int attempt, std::string& failure) {
  std::vector<Worker> workers;
  for (int r = 0; r < o.nproc; ++r) workers.push_back(spawn(o, r, attempt));
  int result = 0;
  auto deadline = std::chrono::steady_clock::time_point::max();
  int forwarded = 0;
  for (;;) {
    if (g_signal && forwarded != g_signal) {  // forward, then wait for them to checkpoint and exit
      forwarded = g_signal;
      signal_all(workers, forwarded);
    }
    std::vector<pollfd> fds;
    for (auto& w : workers) {
      if (w.out >= 0) fds.push_back({w.out, POLLIN, 0});
      if (w.err >= 0) fds.push_back({w.err, POLLIN, 0});
    }
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 100);
    for (auto& w : workers) {
      for (auto* fd : {&w.out, &w.err}) {
        if (*fd < 0) continue;
        pollfd p{*fd, POLLIN, 0};
        if (::poll(&p, 1, 0) > 0 && !pump(*fd, fd == &w.out ? w.out_rest : w.err_rest, w.rank,
                                           fd == &w.out ? std::cout : std::cerr))
          ::close(*fd), *fd = -1;
      }
      if (w.running && ::waitpid(w.pid, &w.status, WNOHANG) == w.pid) {
        w.running = false;
        const bool ok = WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0;
        const int code = WIFEXITED(w.status) ? WEXITSTATUS(w.status) : 0;
        if ((code == 128 + SIGINT || code == 128 + SIGTERM) && result == 0 && !forwarded) {
          // A worker stopped on request (signalled by a scheduler or a user): the others
          // agree at their next step and save with it; no restart, the job ends with its code.
          forwarded = code - 128;
          std::cerr << "segtrain-launch: rank " << w.rank << " stopped on signal " << forwarded
                    << "; stopping the others\n";
          signal_all(workers, forwarded);
          continue;
        }
        if (!ok && result == 0 && !forwarded) {
          // The worker's own code (2: its input is wrong), 1 for a worker killed by a signal.
          result = WIFEXITED(w.status) && code >= 1 && code <= 127 ? code : 1;
          failure = "rank " + std::to_string(w.rank) +
                    (WIFSIGNALED(w.status) ? " was killed by signal " + std::to_string(WTERMSIG(w.status))
                                           : " exited with code " + std::to_string(WEXITSTATUS(w.status)));
          signal_all(workers, SIGTERM);  // tear the others down
          deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        }
      }
    }
    if (std::chrono::steady_clock::now() > deadline) signal_all(workers, SIGKILL);
    bool alive = false;
    for (auto& w : workers) alive |= w.running || w.out >= 0 || w.err >= 0;
    if (!alive) break;
  }
  if (forwarded) return 128 + forwarded;
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  for (int attempt = 0;; ++attempt) {
    std::string failure;
    const int rc = run_attempt(o, attempt, failure);
    if (rc == 0 || rc > 128) return rc;
    if (rc == 2) {  // a config or input error (segtrain's exit 2): the same again on every restart
      std::cerr << "segtrain-launch: " << failure << " (an input or configuration error, which a restart cannot "
                << "fix); not restarting\n";
      return 2;
    }
    if (attempt >= o.max_restarts) {
      std::cerr << "segtrain-launch: " << failure << "; giving up after " << attempt << " restart"
                << (attempt == 1 ? "" : "s") << " (--max-restarts " << o.max_restarts << ")\n";
      return rc;
    }
    std::cerr << "segtrain-launch: " << failure << "; restarting all workers (" << attempt + 1 << " of "
              << o.max_restarts << ")\n";
  }
}
