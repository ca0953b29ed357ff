// segtrain-launch: a torchrun-style launcher (issue 6). Until it lands, it
// documents its interface and refuses to run, with exit code 2.
#include <cstring>
#include <iostream>
#include <string>

namespace {

constexpr const char* kUsage =
    "usage: segtrain-launch [--nproc-per-node N] [--nnodes N --node-rank R --master-addr A --master-port P]\n"
    "                       [--max-restarts K] [--standalone] [--run-id ID] -- CMD...\n"
    "\n"
    "Starts CMD once per local rank with the environment torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK,\n"
    "LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_*), prefixes each rank's output, forwards\n"
    "SIGINT/SIGTERM, and restarts all workers from the newest checkpoint when one fails.\n";

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) break;
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::cout << kUsage;
      return 0;
    }
  }
  std::cerr << "segtrain-launch: error: not built yet (tracked in issue 6)\n" << kUsage;
  return 2;
}
