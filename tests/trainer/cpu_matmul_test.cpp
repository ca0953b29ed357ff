// What bf16 autocast computes its matmuls in on the CPU (trainer/runtime/cpu_matmul.h):
// the probe's rule, and a bf16 run on a CPU without a fast bf16 GEMM (forced with
// SEGTRAIN_CPU_MATMUL=fp32, since this machine has one) computing in fp32.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "test_util.h"
#include "trainer/runtime/cpu_matmul.h"

namespace segtrain {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::kBin;
using test::run;

TEST(CpuMatmul, BothGemmsAreTimedAndBf16IsKeptUnlessItIsTheSlower) {
  const trainer::CpuGemmTimes measured = trainer::time_cpu_gemms();
  EXPECT_GT(measured.bf16_gflops, 0);
  EXPECT_GT(measured.fp32_gflops, 0);
  EXPECT_EQ(trainer::faster_cpu_matmul_dtype({2.2, 15.0}), at::kFloat);  // the AMD CPU of issue 57
  EXPECT_EQ(trainer::faster_cpu_matmul_dtype({38.8, 12.4}), at::kBFloat16);
  EXPECT_EQ(trainer::faster_cpu_matmul_dtype({10.0, 10.0}), at::kBFloat16);
  EXPECT_EQ(trainer::faster_cpu_matmul_dtype({6.0, 10.0}), at::kBFloat16) << "timing noise, not a slow kernel";
  EXPECT_EQ(trainer::faster_cpu_matmul_dtype({4.0, 10.0}), at::kFloat);
  const std::string fallback = trainer::describe({at::kFloat, trainer::CpuMatmulSource::measured, {2.2, 15.0}});
  EXPECT_NE(fallback.find("no fast bf16 GEMM (measured: bf16 2.2 GFLOP/s, fp32 15.0)"), std::string::npos) << fallback;
  EXPECT_NE(fallback.find("the weights stay as stored"), std::string::npos) << fallback;
}

class CpuMatmulRun : public test::SyntheticStoreSuite {
 protected:
  // `segtrain train` of the tiny Llama with `sets`, SEGTRAIN_CPU_MATMUL=`matmul` ("" leaves it unset).
  static test::RunResult train(const std::string& name, const std::string& matmul, std::vector<std::string> sets,
                               const std::string& arch = "llama") {
    return run("env", train_args(name, matmul, std::move(sets), arch));
  }
  // The same run as ranks 0 and 1 of a Gloo group, each with its own SEGTRAIN_CPU_MATMUL.
  static std::pair<test::RunResult, test::RunResult> train_two_ranks(const std::string& name,
                                                                     const std::string& matmul0,
                                                                     const std::string& matmul1,
                                                                     const std::vector<std::string>& sets) {
    const std::string port = std::to_string(test::unused_port());
    auto rank_args = [&](int rank) {
      std::vector<std::string> a = {"RANK=" + std::to_string(rank), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
                                    "MASTER_PORT=" + port};
      const auto args = train_args(name, rank == 0 ? matmul0 : matmul1, sets, "llama");
      a.insert(a.end(), args.begin(), args.end());
      return a;
    };
    test::RunResult second;
    std::thread other([&] { second = run("env", rank_args(1)); });
    test::RunResult first = run("env", rank_args(0));
    other.join();
    return {first, second};
  }
  static std::vector<std::string> train_args(const std::string& name, const std::string& matmul,
                                             std::vector<std::string> sets, const std::string& arch) {
    std::vector<std::string> args = matmul.empty() ? std::vector<std::string>{"-u", "SEGTRAIN_CPU_MATMUL"}
                                                   : std::vector<std::string>{"SEGTRAIN_CPU_MATMUL=" + matmul};
    for (const std::string& a : {kBin, std::string("train"), tiny_run_config(name, {.arch = arch}),
                                 std::string("--set"), std::string("train.budget.tokens=1500")})
      args.push_back(a);
    args.insert(args.end(), sets.begin(), sets.end());
    return args;
  }
  // Whether two runs' final weights are the same bytes.
  static bool same_weights(const std::string& a, const std::string& b) {
    return test::read_file(run_dir(a) + "/final/model.safetensors") ==
           test::read_file(run_dir(b) + "/final/model.safetensors");
  }
  static std::string recorded_matmul(const std::string& checkpoint) {
    return json::parse(test::read_file(fs::path(checkpoint) / "trainer_state.json")).value("cpu_matmul", "");
  }
  static std::vector<double> losses(const std::string& name) {
    std::vector<double> out;
    std::istringstream lines(test::read_file(run_dir(name) + "/metrics.jsonl"));
    for (std::string line; std::getline(lines, line);) out.push_back(json::parse(line)["loss"].get<double>());
    return out;
  }
};

// bf16 autocast whose matmuls run in fp32, with fp32 weights, is the fp32 run to the bit;
// the same run in bf16 is not (so the variable is read), and the plan says which.
TEST_F(CpuMatmulRun, Bf16OnACpuWithoutFastBf16GemmsComputesAsFp32) {
  const auto fp32 = train("fp32", "", {"--set", "train.precision=fp32"});
  ASSERT_EQ(fp32.exit_code, 0) << fp32.err;
  const auto fallback = train("bf16-in-fp32", "fp32", {"--set", "train.precision=bf16"});
  ASSERT_EQ(fallback.exit_code, 0) << fallback.err;
  const auto bf16 = train("bf16", "bf16", {"--set", "train.precision=bf16"});
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  EXPECT_NE(fallback.err.find("computes its matmuls in fp32 (SEGTRAIN_CPU_MATMUL)"), std::string::npos)
      << fallback.err;
  EXPECT_EQ(fp32.err.find("SEGTRAIN_CPU_MATMUL"), std::string::npos) << "an fp32 run has no bf16 matmuls to choose";
  ASSERT_GT(losses("fp32").size(), 3U);
  EXPECT_EQ(losses("bf16-in-fp32"), losses("fp32"));
  EXPECT_NE(losses("bf16"), losses("fp32"));
}

// bf16 weights (train.param_dtype: bf16) stay bf16 in memory and are read by fp32 matmuls:
// the run trains, within bf16's rounding of the fp32 run, with RMSNorm (llama) and with
// LayerNorm (gpt_neox, whose CPU kernel refuses bf16 weights on an fp32 input unless cast).
TEST_F(CpuMatmulRun, Bf16WeightsStayBf16UnderFp32Matmuls) {
  for (const std::string arch : {"llama", "gpt_neox"}) {
    const auto fp32 = train("fp32-ref-" + arch, "", {"--set", "train.precision=fp32"}, arch);
    ASSERT_EQ(fp32.exit_code, 0) << fp32.err;
    const auto stored = train("bf16-weights-" + arch, "fp32",
                              {"--set", "train.precision=bf16", "--set", "train.param_dtype=bf16"}, arch);
    ASSERT_EQ(stored.exit_code, 0) << arch << "\n" << stored.err;
    EXPECT_NE(stored.err.find("the weights stay as stored"), std::string::npos) << stored.err;
    const auto a = losses("fp32-ref-" + arch), b = losses("bf16-weights-" + arch);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 0.05) << arch << " step " << i + 1;
  }
}

// A bf16 run records what its matmuls computed in, and its resumption computes in that, whatever
// the probe would measure now (a loaded machine may measure otherwise): from a checkpoint of a
// run in bf16 and of one in fp32 (one of the two is what this CPU's probe does not choose), the
// resumed run's losses are the uninterrupted run's to the bit. SEGTRAIN_CPU_MATMUL still forces
// the other, and says that the steps will then not repeat the run's.
TEST_F(CpuMatmulRun, AResumedRunComputesItsMatmulsAsTheRunItResumesDid) {
  const std::vector<std::string> sets = {"--set", "train.precision=bf16", "--set", "train.checkpoint_every=2",
                                         "--set", "train.keep_last=0"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), sets.begin(), sets.end());
    return more;
  };
  auto from_step_2 = [&](const std::string& whole, const std::string& name) {
    fs::create_directories(run_dir(name) + "/checkpoints");
    fs::copy(run_dir(whole) + "/checkpoints/step-2", run_dir(name) + "/checkpoints/step-2",
             fs::copy_options::recursive);
  };
  for (const std::string matmul : {"bf16", "fp32"}) {
    const auto whole = train("whole-" + matmul, matmul, with({}));
    ASSERT_EQ(whole.exit_code, 0) << whole.err;
    EXPECT_EQ(recorded_matmul(run_dir("whole-" + matmul) + "/checkpoints/step-2"), matmul);
    EXPECT_EQ(recorded_matmul(run_dir("whole-" + matmul) + "/final"), matmul);

    from_step_2("whole-" + matmul, "resumed-" + matmul);
    const auto resumed = train("resumed-" + matmul, "", with({"--resume"}));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
    EXPECT_NE(resumed.err.find("computes its matmuls in " + matmul + " as the run it resumes did"), std::string::npos)
        << resumed.err;
    const auto reference = losses("whole-" + matmul), after = losses("resumed-" + matmul);
    ASSERT_GT(reference.size(), 3U);
    EXPECT_EQ(after, std::vector<double>(reference.begin() + 2, reference.end())) << matmul;
    EXPECT_TRUE(same_weights("resumed-" + matmul, "whole-" + matmul)) << matmul;
  }
  from_step_2("whole-bf16", "forced-fp32");
  const auto forced = train("forced-fp32", "fp32", with({"--resume"}));
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_NE(forced.err.find("SEGTRAIN_CPU_MATMUL=fp32: this run computes its matmuls in fp32 where the run it "
                            "resumes computed them in bf16, so its steps will not repeat that run's exactly"),
            std::string::npos)
      << forced.err;
  EXPECT_EQ(recorded_matmul(run_dir("forced-fp32") + "/final"), "fp32");
  const auto bf16_run = losses("whole-bf16");
  EXPECT_NE(losses("forced-fp32"), std::vector<double>(bf16_run.begin() + 2, bf16_run.end()));
  // An fp32 run has no matmul choice to record.
  const auto fp32 = train("fp32-run", "", {"--set", "train.precision=fp32"});
  ASSERT_EQ(fp32.exit_code, 0) << fp32.err;
  EXPECT_EQ(recorded_matmul(run_dir("fp32-run") + "/final"), "");
}

// The ranks of a run compute in rank 0's choice: with rank 1 told fp32 and rank 0 bf16, the run
// is the one whose ranks both compute in bf16, to the bit, and rank 0 says so.
TEST_F(CpuMatmulRun, EveryRankComputesItsMatmulsAsRankZeroDoes) {
  const std::vector<std::string> sets = {"--set", "train.precision=bf16"};
  const auto [same0, same1] = train_two_ranks("ranks-bf16", "bf16", "bf16", sets);
  ASSERT_EQ(same0.exit_code, 0) << same0.err;
  ASSERT_EQ(same1.exit_code, 0) << same1.err;
  const auto [mixed0, mixed1] = train_two_ranks("ranks-mixed", "bf16", "fp32", sets);
  ASSERT_EQ(mixed0.exit_code, 0) << mixed0.err;
  ASSERT_EQ(mixed1.exit_code, 0) << mixed1.err;
  EXPECT_NE(mixed0.err.find("SEGTRAIN_CPU_MATMUL=fp32 on 1 of the other 1 ranks: every rank computes its matmuls "
                            "in bf16 as rank 0 does"),
            std::string::npos)
      << mixed0.err;
  EXPECT_EQ(same0.err.find("as rank 0 does"), std::string::npos) << same0.err;
  ASSERT_GT(losses("ranks-bf16").size(), 3U);
  EXPECT_EQ(losses("ranks-mixed"), losses("ranks-bf16"));
  EXPECT_TRUE(same_weights("ranks-mixed", "ranks-bf16"));
}

TEST_F(CpuMatmulRun, AnUnknownChoiceIsRefusedNamingTheVariable) {
  const auto refused = train("bad-choice", "fp16", {"--set", "train.precision=bf16"});
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("SEGTRAIN_CPU_MATMUL=fp16: expected auto, bf16 or fp32"), std::string::npos)
      << refused.err;
  EXPECT_EQ(refused.err.find("Exception raised"), std::string::npos) << "a C++ backtrace: " << refused.err;
}

}  // namespace
}  // namespace segtrain
