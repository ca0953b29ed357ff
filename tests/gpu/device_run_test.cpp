// The GPU suite (gpu/gpu_suite.h): whole runs of the binary on the device, as a user runs them.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gpu/device_run.h"
#include "gpu/gpu_suite.h"
#include "test_util.h"

namespace segtrain {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::DeviceRun;
using test::device_under_test;
using test::kBin;
using test::record;
using test::run;

// Runs `segtrain args...`, SIGTERMs it once `metrics` has `lines` lines; returns its exit status.
int run_until(const std::vector<std::string>& args, const std::string& metrics, long lines) {
  pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> argv = {const_cast<char*>(kBin.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    if (!freopen("/dev/null", "w", stderr)) _exit(126);
    execv(kBin.c_str(), argv.data());
    _exit(127);
  }
  auto logged = [&] {
    const std::string text = test::read_file(metrics);
    return std::count(text.begin(), text.end(), '\n');
  };
  for (int i = 0; i < 12000 && logged() < lines; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Interrupted by SIGTERM and resumed on the device, a chunk run follows the
// uninterrupted one: same steps, tokens and data cursor exactly; the losses
// within 1e-4 (CUDA's fused attention backward may sum in a different order from
// run to run, so bitwise equality is only asked of the CPU, by train_cli_test).
TEST_F(DeviceRun, ChunkRunTrainsAndResumesExactly) {
  REQUIRE_DEVICE(1);
  const std::string dev = device_under_test();
  const std::vector<std::string> sets = {"--set", "train.budget.tokens=96000", "--set", "train.checkpoint_every=25",
                                         "--set", "train.precision=bf16"};
  auto args = [&](const std::string& name) {
    std::vector<std::string> a = {"train", config(name, dev)};
    a.insert(a.end(), sets.begin(), sets.end());
    return a;
  };
  auto whole = run(kBin, args("whole"), 900);
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const auto want = rows(run_dir("whole"));
  ASSERT_GT(want.size(), 100u);
  for (const auto& row : want) {
    ASSERT_TRUE(std::isfinite(row["loss"].get<double>())) << row.dump();
    EXPECT_GT(row["peak_rss_mb"].get<double>(), 0) << row.dump();
    if (dev == "cuda") {
      EXPECT_GT(row["peak_gpu_mb"].get<double>(), 0) << row.dump();
    }
  }
  EXPECT_LT(want.back()["loss"].get<double>(), want.front()["loss"].get<double>()) << "the run did not learn";
  const json eval = json::parse(test::read_file(run_dir("whole") + "/eval.json"));
  EXPECT_EQ(eval["device"], dev == "cuda" ? "cuda:0" : "cpu");
  if (dev == "cuda") {
    EXPECT_GT(eval["peak_gpu_mb"].get<double>(), 0);
  }

  ASSERT_EQ(run_until(args("cut"), run_dir("cut") + "/metrics.jsonl", 60), 143)
      << "the run ended before SIGTERM or failed";
  ASSERT_FALSE(fs::exists(run_dir("cut") + "/final"));
  auto resume_args = args("cut");
  resume_args.push_back("--resume");
  auto resumed = run(kBin, resume_args, 900);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;

  const auto got = rows(run_dir("cut"));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i]["step"], want[i]["step"]);
    EXPECT_EQ(got[i]["tokens"], want[i]["tokens"]);
    EXPECT_NEAR(got[i]["loss"].get<double>(), want[i]["loss"].get<double>(), 1e-4) << "step " << i + 1;
  }
  for (const char* key : {"step", "tokens", "loss_tokens", "data_cursor"})
    EXPECT_EQ(state_of(run_dir("cut") + "/final")[key], state_of(run_dir("whole") + "/final")[key]) << key;
}

// A bf16 run with the fused paths (SEGTRAIN_FUSED_KERNELS=1) follows the run without, for each
// model they touch: gpt_neox (the RoPE kernel), llama (RoPE and ATen's fused RMSNorm on the bf16
// parameters that train.param_dtype auto gives a bf16 run on CUDA), bloom (ALiBi folded into q.k),
// gpt2, gpt_neox and bloom (the blocks' LayerNorms on the bf16 stream outside autocast; the final
// and embedding norms stay fp32), llama's MLP (the SwiGLU
// kernels), and every one of them (the LM head's cross-entropy kernel):
// 8 steps' losses within 1e-3 (the fused attention's backward sums in no fixed order; bloom's
// folded bias, 5e-3), its plan line saying so. The CPU keeps the composites: there the losses are equal.
// The first step's log line names the paths its forward took (kernels/forward_paths.h): with the
// switch on, the fused RoPE kernel, ATen's fused RMSNorm, ALiBi folded, a fused SDPA kernel and
// the cross-entropy kernel, LayerNorm in 16 bits (fp32 without the switch), the SwiGLU kernels.
// gpt2, gpt_neox and llama also run with SEGTRAIN_FUSED_KERNELS=all (the linears' bias-gradient kernels,
// GELU's tanh and erf; GPT-2's and Llama's residual adds fused with the norm after each: ln2, the next block's
// ln1, Llama's final RMSNorm), within the same tolerance of the run without.
TEST_F(DeviceRun, Bf16StepsWithFusedKernelsEqualStepsWithout) {
  REQUIRE_DEVICE(1);
  const std::string dev = device_under_test();
  for (const std::string arch : {"gpt2", "gpt_neox", "llama", "bloom"}) {
    std::vector<std::vector<double>> losses;
    std::vector<std::string> switches = {"0", "1"};
    if (arch != "bloom") switches.push_back("all");
    for (const std::string& fused : switches) {
      const std::string name = "fused-" + arch + "-" + fused;
      tiny_run_config(name, {.arch = arch, .run_keys = ", device: " + dev, .eval_lengths = "[32, 128]"});
      std::vector<std::string> args = {"SEGTRAIN_FUSED_KERNELS=" + fused, kBin, "train", config_path(name), "--set",
                                       "train.budget.tokens=1024", "--set", "train.precision=bf16"};
      if (arch == "gpt2") args.insert(args.end(), {"--set", "model.extension.method=interpolate"});  // its table is shorter than L_e
      auto trained = run("env", args, 900);
      ASSERT_EQ(trained.exit_code, 0) << arch << ": " << trained.err;
      if (fused != "0" && dev == "cuda") {
        EXPECT_NE((trained.out + trained.err).find("fused CUDA kernels on"), std::string::npos) << trained.err;
        // What the first step's forward took (kernels/forward_paths.h), each in bf16 on a fused SDPA kernel.
        // BLOOM's block norms stay fp32, as in transformers: its embedding LayerNorm (read by the stream, not a
        // matmul) returns autocast's fp32, so its residual stream, which every block norm reads, is fp32.
        // With all, GPT-2's and Llama's ln2 and later ln1 are fused with the residual add before them, gpt_neox's
        // later ln1 (its parallel residual's MLP add); the first block's ln1 has no add before it, so its own path
        // is named too.
        const std::string took = arch == "llama"  ? (fused == "all" ? "RoPE fused kernel; RMSNorm fused (ATen); residual add + "
                                                                      "RMSNorm fused kernel; attention causal"
                                                                    : "RoPE fused kernel; RMSNorm fused (ATen); attention causal")
                                 : arch == "bloom" ? "LayerNorm fp32; attention ALiBi folded into q·k; SDPA kernel "
                                 : arch == "gpt2"  ? (fused == "all" ? "LayerNorm 16-bit and fp32; residual add + LayerNorm "
                                                                       "fused kernel; attention causal"
                                                                     : "LayerNorm 16-bit and fp32; attention causal")
                                 : fused == "all"  ? "RoPE fused kernel; LayerNorm 16-bit and fp32; residual add + LayerNorm "
                                                     "fused kernel; attention causal"
                                                   : "RoPE fused kernel; LayerNorm 16-bit and fp32; attention causal";
        EXPECT_NE(trained.err.find("step 1's forward took: " + took), std::string::npos) << arch << ": " << trained.err;
        // The tiny Llama has no biases: no bias-gradient kernel.
        const std::string last = fused == "all" && arch != "llama"
                                     ? "; cross-entropy fused kernel; bias gradients kernel (GELU's too)\n"
                                     : "; cross-entropy fused kernel\n";
        EXPECT_NE(trained.err.find(std::string(arch == "llama" ? "; SwiGLU fused kernel" : "") + last), std::string::npos)
            << arch << " " << fused << ": " << trained.err;
        EXPECT_TRUE(trained.err.find("SDPA kernel flash") != std::string::npos ||
                    trained.err.find("SDPA kernel cuDNN") != std::string::npos)
            << arch << ": " << trained.err;
        const std::string said = "step 1's forward took: ";
        if (const auto at = trained.err.find(said); at != std::string::npos)
          record("fused kernels" + std::string(fused == "all" ? " (all)" : "") + ", " + arch + ": " +
                 trained.err.substr(at + said.size(), trained.err.find('\n', at) - at - said.size()));
      }
      // Without the switch autocast runs LayerNorm in fp32 on the bf16 stream.
      if (fused == "0" && dev == "cuda" && arch != "llama") {
        EXPECT_NE(trained.err.find("LayerNorm fp32; "), std::string::npos) << arch << ": " << trained.err;
      }
      losses.emplace_back();
      for (const auto& row : rows(run_dir(name))) losses.back().push_back(row["loss"].get<double>());
    }
    const double tolerance = dev != "cuda" ? 0.0 : arch == "bloom" ? 5e-3 : 1e-3;
    for (size_t s = 0; s < switches.size(); ++s) {
      ASSERT_EQ(losses[s].size(), 8u) << arch << " " << switches[s];
      for (size_t i = 0; i < 8; ++i)
        EXPECT_NEAR(losses[s][i], losses[0][i], tolerance) << arch << " " << switches[s] << " step " << i + 1;
    }
  }
}

// train.micro_batch_size auto against the caching allocator's own peak: runs of micro-batch 1
// and 32 peak at P1 and P32 (metrics.jsonl's peak_gpu_mb); with train.batch_memory_gib halfway
// between, auto takes a micro-batch below 32 (its plan line says which and what it measured)
// and its run's peak stays within the budget. With room for all 32, it takes 32. On the CPU as
// the device (no allocator peak to hold it to) only the choices and plan lines are checked.
TEST_F(DeviceRun, MicroBatchAutoKeepsTheRunsPeakWithinTheBudget) {
  REQUIRE_DEVICE(1);
  const std::string dev = device_under_test();
  const std::vector<std::string> wider = {"--set", "model.d_model=512", "--set", "model.n_layers=4", "--set",
                                          "train.budget.tokens=2048", "--set", "train.precision=bf16"};
  auto train = [&](const std::string& name, const std::vector<std::string>& sets) {
    std::vector<std::string> args = {"train", config(name, dev)};
    args.insert(args.end(), wider.begin(), wider.end());
    args.insert(args.end(), sets.begin(), sets.end());
    return run(kBin, args, 900);
  };
  auto chosen = [](const std::string& err) {
    std::smatch m;
    return std::regex_search(err, m, std::regex(R"(micro-batch auto: (\d+) \(measured: )")) ? std::stoi(m[1]) : -1;
  };
  const std::vector<std::string> automatic = {"--set", "train.micro_batch_size=auto", "--set",
                                              "train.global_batch_size=32"};
  auto roomy = train("auto-roomy", automatic);
  ASSERT_EQ(roomy.exit_code, 0) << roomy.err;
  EXPECT_EQ(chosen(roomy.err), 32) << roomy.err;
  if (dev != "cuda") return;
  auto one = train("auto-1", {"--set", "train.micro_batch_size=1"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto all = train("auto-32", {"--set", "train.micro_batch_size=32"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  const double p1 = peak_gpu_mib("auto-1"), p32 = peak_gpu_mib("auto-32"), budget_mib = (p1 + p32) / 2;
  ASSERT_GT(p32, p1) << "32 sequences must hold more than 1";
  std::vector<std::string> tight = automatic;
  tight.insert(tight.end(), {"--set", "train.batch_memory_gib=" + std::to_string(budget_mib / 1024.0)});
  auto halfway = train("auto-halfway", tight);
  ASSERT_EQ(halfway.exit_code, 0) << halfway.err;
  const int micro = chosen(halfway.err);
  EXPECT_GE(micro, 1) << halfway.err;
  EXPECT_LT(micro, 32) << halfway.err;
  EXPECT_LE(peak_gpu_mib("auto-halfway"), budget_mib) << halfway.err;
  record("micro_batch_size auto on " + dev + ": P1 " + std::to_string(p1) + " MiB, P32 " + std::to_string(p32) +
         " MiB, budget " + std::to_string(budget_mib) + " MiB -> micro-batch " + std::to_string(micro) + " peaking at " +
         std::to_string(peak_gpu_mib("auto-halfway")) + " MiB");
}

// model.activation_checkpointing auto against the caching allocator's own peak: runs that recompute no block
// and every block peak at P0 and Pall (metrics.jsonl's peak_gpu_mb); with train.batch_memory_gib halfway
// between, auto recomputes some blocks but not all (its plan line says how many and what it measured), and its
// run's peak stays within the budget. With room for every block's activations it recomputes none. On the CPU as
// the device (no allocator peak to hold it to) only that choice and its plan line are checked.
TEST_F(DeviceRun, ActivationCheckpointingAutoKeepsTheRunsPeakWithinTheBudget) {
  REQUIRE_DEVICE(1);
  const std::string dev = device_under_test();
  // bf16 and a wider model where they are fast (a CUDA device); on the CPU the choice is the point.
  const std::vector<std::string> wider = {"--set", "model.d_model=" + std::string(dev == "cuda" ? "512" : "128"),
                                          "--set", "model.n_layers=4", "--set",
                                          "train.budget.tokens=2048", "--set",
                                          "train.precision=" + std::string(dev == "cuda" ? "bf16" : "fp32"), "--set",
                                          "train.micro_batch_size=16", "--set", "data.train_length=128"};
  auto train = [&](const std::string& name, const std::string& checkpointing, const std::string& budget_gib) {
    std::vector<std::string> args = {"train", config(name, dev)};
    args.insert(args.end(), wider.begin(), wider.end());
    args.insert(args.end(), {"--set", "model.activation_checkpointing=" + checkpointing});
    if (!budget_gib.empty()) args.insert(args.end(), {"--set", "train.batch_memory_gib=" + budget_gib});
    return run(kBin, args, 900);
  };
  auto recomputed = [](const std::string& err) {
    std::smatch m;
    return std::regex_search(err, m, std::regex(R"(activation checkpointing auto: (\d+) of 4 blocks \(measured: )"))
               ? std::stoi(m[1])
               : -1;
  };
  auto roomy = train("recompute-roomy", "auto", "64");
  ASSERT_EQ(roomy.exit_code, 0) << roomy.err;
  EXPECT_EQ(recomputed(roomy.err), 0) << roomy.err;
  if (dev != "cuda") return;
  auto none = train("recompute-none", "false", "");
  ASSERT_EQ(none.exit_code, 0) << none.err;
  auto every = train("recompute-every", "true", "");
  ASSERT_EQ(every.exit_code, 0) << every.err;
  const double p0 = peak_gpu_mib("recompute-none"), p_all = peak_gpu_mib("recompute-every"), budget_mib = (p0 + p_all) / 2;
  ASSERT_GT(p0, p_all) << "recomputing every block must hold less than recomputing none";
  auto halfway = train("recompute-halfway", "auto", std::to_string(budget_mib / 1024.0));
  ASSERT_EQ(halfway.exit_code, 0) << halfway.err;
  const int blocks = recomputed(halfway.err);
  EXPECT_GE(blocks, 1) << halfway.err;
  EXPECT_LE(blocks, 3) << halfway.err;
  EXPECT_LE(peak_gpu_mib("recompute-halfway"), budget_mib) << halfway.err;
  record("activation_checkpointing auto on " + dev + ": P0 " + std::to_string(p0) + " MiB, Pall " +
         std::to_string(p_all) + " MiB, budget " + std::to_string(budget_mib) + " MiB -> " + std::to_string(blocks) +
         " of 4 blocks recomputed, peaking at " + std::to_string(peak_gpu_mib("recompute-halfway")) + " MiB");
}

// Activation checkpointing recomputes each block in backward (on CUDA, on autograd's device
// thread) under the forward's autocast state: 8 bf16 steps with it give the losses of 8 without.
// A recomputation that reused a bf16 cast made before the optimizer's in-place update (autocast's
// cache) would differ from the first step on. On the CPU the losses are equal; on CUDA the fused
// attention backward sums in no fixed order, hence 1e-3.
TEST_F(DeviceRun, Bf16StepsWithActivationCheckpointingEqualStepsWithout) {
  REQUIRE_DEVICE(1);
  const std::string dev = device_under_test();
  std::vector<std::vector<double>> losses;
  for (const std::string checkpointing : {"false", "true"}) {
    const std::string name = "checkpointing-" + checkpointing;
    auto trained = run(kBin, {"train", config(name, dev), "--set", "train.budget.tokens=1024", "--set",
                              "train.precision=bf16", "--set", "model.activation_checkpointing=" + checkpointing},
                       900);
    ASSERT_EQ(trained.exit_code, 0) << trained.err;
    losses.emplace_back();
    for (const auto& row : rows(run_dir(name))) losses.back().push_back(row["loss"].get<double>());
  }
  ASSERT_EQ(losses[0].size(), 8u) << "1,024 tokens = 8 steps of 4 x 32";
  ASSERT_EQ(losses[1].size(), losses[0].size());
  double most = 0;
  for (size_t i = 0; i < losses[0].size(); ++i) {
    most = std::max(most, std::abs(losses[0][i] - losses[1][i]));
    EXPECT_NEAR(losses[1][i], losses[0][i], dev == "cuda" ? 1e-3 : 0.0) << "step " << i + 1;
  }
  record("8 bf16 steps with and without activation checkpointing on " + dev + ": largest loss difference " +
         std::to_string(most));
}

// A run trained on the device, exported; the same run continued on the CPU (its
// budget is spent, so it only loads and saves the weights), exported: the two
// exports are the same bytes, and so are the two final checkpoints' weights.
TEST_F(DeviceRun, ExportOfADeviceRunEqualsExportOfTheSameWeightsOnTheCpu) {
  REQUIRE_DEVICE(1);
  auto trained = run(kBin, {"train", config("exported", device_under_test()), "--set", "train.budget.tokens=6000",
                            "--set", "train.precision=bf16"},
                     900);
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  fs::copy(run_dir("exported"), run_dir("exported-cpu"), fs::copy_options::recursive);
  fs::remove(run_dir("exported-cpu") + "/eval.json");
  auto on_cpu = run(kBin, {"train", config("exported-cpu", "cpu"), "--resume", "--set", "train.budget.tokens=6000",
                           "--set", "train.precision=bf16"},
                    900);
  ASSERT_EQ(on_cpu.exit_code, 0) << on_cpu.err;
  EXPECT_EQ(json::parse(test::read_file(run_dir("exported-cpu") + "/eval.json"))["device"], "cpu");
  EXPECT_EQ(test::read_file(run_dir("exported") + "/final/model.safetensors"),
            test::read_file(run_dir("exported-cpu") + "/final/model.safetensors"));
  for (const std::string name : {"exported", "exported-cpu"}) {
    auto exported = run(kBin, {"export", "--model", run_dir(name) + "/final", "--out", *dir_ / ("hf-" + name)});
    ASSERT_EQ(exported.exit_code, 0) << exported.err;
  }
  EXPECT_EQ(test::read_file(*dir_ / "hf-exported/model.safetensors"),
            test::read_file(*dir_ / "hf-exported-cpu/model.safetensors"));
  EXPECT_EQ(test::read_file(*dir_ / "hf-exported/config.json"), test::read_file(*dir_ / "hf-exported-cpu/config.json"));
}

// ---------------------------------------------------------------------------
// A short run of every architecture on the device, end to end.

struct ArchCase {
  std::string arch;
  std::vector<std::string> sets;  // what the architecture needs to train at L_e = 128 positions
};

void PrintTo(const ArchCase& c, std::ostream* out) { *out << c.arch; }

class EveryArchitectureRun : public DeviceRun, public ::testing::WithParamInterface<ArchCase> {};

// Trains on the device (bf16 autocast, checkpoints every 10 steps), is stopped
// by SIGTERM after 20 logged steps, resumes to the end of its budget: every
// step logged once and in order with a finite loss, the final state at the last
// step, eval.json written on the device with finite perplexities at L = 32 and
// at the extended L = 128. gpt2's learned table has train_length = 32 rows, so
// the chunk sampler's positions (up to 128) go through model.extension.method
// interpolate; bloom is ALiBi; gpt_neox and llama RoPE (llama with SwiGLU and RMSNorm).
TEST_P(EveryArchitectureRun, TrainsResumesAndEvaluates) {
  REQUIRE_DEVICE(1);
  const std::string dev = device_under_test();
  const ArchCase& c = GetParam();
  const std::string name = "arch-" + c.arch;
  tiny_run_config(name, {.arch = c.arch, .run_keys = ", device: " + dev, .eval_lengths = "[32, 128]"});
  std::vector<std::string> args = {"train", config_path(name), "--set", "train.budget.tokens=24000", "--set",
                                   "train.checkpoint_every=10", "--set", "train.precision=bf16"};
  args.insert(args.end(), c.sets.begin(), c.sets.end());
  ASSERT_EQ(run_until(args, run_dir(name) + "/metrics.jsonl", 20), 143) << "the run ended before SIGTERM or failed";
  ASSERT_FALSE(fs::exists(run_dir(name) + "/final"));
  const size_t cut = rows(run_dir(name)).size();
  args.push_back("--resume");
  auto resumed = run(kBin, args, 900);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;

  const auto got = rows(run_dir(name));
  ASSERT_GT(got.size(), cut) << "the resumed run trained no further";
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i]["step"].get<int64_t>(), static_cast<int64_t>(i + 1)) << "logged row " << i + 1;
    EXPECT_TRUE(std::isfinite(got[i]["loss"].get<double>())) << got[i].dump();
  }
  EXPECT_EQ(state_of(run_dir(name) + "/final")["step"], got.back()["step"]);
  const json eval = json::parse(test::read_file(run_dir(name) + "/eval.json"));
  EXPECT_EQ(eval["device"], dev == "cuda" ? "cuda:0" : "cpu");
  std::vector<int64_t> lengths;
  for (const auto& r : eval["results"]) {
    lengths.push_back(r["length"].get<int64_t>());
    EXPECT_TRUE(r["ppl"].is_number() && std::isfinite(r["ppl"].get<double>())) << r.dump();  // null: not finite
  }
  EXPECT_EQ(lengths, (std::vector<int64_t>{32, 128})) << eval.dump();
  std::ostringstream line;
  line << c.arch << " run on " << dev << ": " << got.size() << " steps (SIGTERM after " << cut << ", resumed), loss "
       << got.front()["loss"].get<double>() << " -> " << got.back()["loss"].get<double>();
  record(line.str());
}

INSTANTIATE_TEST_SUITE_P(OnTheDevice, EveryArchitectureRun,
                         ::testing::Values(ArchCase{"gpt2", {"--set", "model.extension.method=interpolate"}},
                                           ArchCase{"gpt_neox", {}}, ArchCase{"bloom", {}}, ArchCase{"llama", {}}),
                         [](const auto& info) { return info.param.arch; });

}  // namespace
}  // namespace segtrain
