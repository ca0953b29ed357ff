// TransformerLM training-step throughput, as JSON on stdout (bench/run.sh):
// forward + backward tokens/s and peak resident memory for each arch at a few
// small sizes, with and without activation checkpointing. Every configuration
// runs in its own child process (this binary with --one) so that each peak RSS
// is that configuration's own; model_rss_mb is the resident size before the
// first step, so peak - model is what the step itself needs.
#include <sys/resource.h>
#include <torch/nn/functional/loss.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "models/modules/transformer.h"

using namespace segtrain::models;
using Clock = std::chrono::steady_clock;

namespace {

struct Size {
  const char* arch;
  int64_t d_model, layers, heads, batch, length;
  bool checkpointing;
};

double current_rss_mb() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

std::string run_one(const Size& s) {
  ModelConfig c;
  c.arch = *segtrain::enum_from_name(kArchs, s.arch);
  c.vocab_size = 4096;
  c.d_model = s.d_model;
  c.n_layers = s.layers;
  c.n_heads = s.heads;
  c.max_positions = s.length;
  c.rope.rotary_pct = 0.25;
  if (s.checkpointing) c.activation_checkpointing = ActivationCheckpointing::every_block();
  at::manual_seed(0);
  TransformerLM model(c);
  model->train();
  auto tokens = at::randint(4096, {s.batch, s.length});
  auto positions = at::arange(s.length).repeat({s.batch, 1});
  auto step = [&] {
    auto logits = model->forward(tokens, positions);
    auto loss = torch::nn::functional::cross_entropy(logits.view({-1, 4096}), tokens.view(-1));
    loss.backward();
    for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
  };
  const double baseline_mb = current_rss_mb();
  step();  // warm-up: allocator and kernel selection
  const int steps = 3;
  const auto start = Clock::now();
  for (int i = 0; i < steps; ++i) step();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  char line[512];
  std::snprintf(line, sizeof(line),
                "{\"arch\": \"%s\", \"d_model\": %lld, \"layers\": %lld, \"heads\": %lld, \"batch\": %lld, "
                "\"length\": %lld, \"checkpointing\": %s, \"threads\": %d, \"tokens_per_s\": %.1f, "
                "\"peak_rss_mb\": %.1f, \"model_rss_mb\": %.1f}",
                s.arch, (long long)s.d_model, (long long)s.layers, (long long)s.heads, (long long)s.batch,
                (long long)s.length, s.checkpointing ? "true" : "false", at::get_num_threads(),
                steps * s.batch * s.length / seconds, usage.ru_maxrss / 1024.0, baseline_mb);
  return line;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Size> sizes;
  for (const char* arch : {"gpt2", "gpt_neox", "bloom"}) {
    sizes.push_back({arch, 128, 4, 4, 8, 256, false});
    sizes.push_back({arch, 256, 8, 8, 2, 1024, false});
    sizes.push_back({arch, 256, 8, 8, 2, 1024, true});
  }
  if (argc == 3 && std::string(argv[1]) == "--one") {
    std::cout << run_one(sizes.at(std::stoul(argv[2]))) << std::endl;
    return 0;
  }
  std::cout << "[\n";
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string cmd = std::string("/proc/") + std::to_string(getpid()) + "/exe --one " + std::to_string(i);
    FILE* pipe = popen(cmd.c_str(), "r");
    std::string out;
    char buffer[1024];
    while (pipe && fgets(buffer, sizeof(buffer), pipe)) out += buffer;
    if (!pipe || pclose(pipe) != 0 || out.empty()) {
      std::cerr << "model_bench: configuration " << i << " failed\n";
      return 1;
    }
    while (!out.empty() && out.back() == '\n') out.pop_back();
    std::cout << "  " << out << (i + 1 < sizes.size() ? ",\n" : "\n") << std::flush;
  }
  std::cout << "]\n";
  return 0;
}
