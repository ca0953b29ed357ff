// What bf16 autocast computes its matmuls in on the CPU (trainer/runtime/cpu_matmul.h):
// the probe's rule, and a bf16 run on a CPU without a fast bf16 GEMM (forced with
// SEGTRAIN_CPU_MATMUL=fp32, since this machine has one) computing in fp32.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "test_util.h"
#include "trainer/runtime/cpu_matmul.h"

namespace segtrain {
namespace {

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
  const std::string fallback = trainer::describe({at::kFloat, false, {2.2, 15.0}});
  EXPECT_NE(fallback.find("no fast bf16 GEMM (measured: bf16 2.2 GFLOP/s, fp32 15.0)"), std::string::npos) << fallback;
  EXPECT_NE(fallback.find("the weights stay as stored"), std::string::npos) << fallback;
}

class CpuMatmulRun : public test::SyntheticStoreSuite {
 protected:
  // `segtrain train` of the tiny Llama with `sets`, SEGTRAIN_CPU_MATMUL=`matmul` ("" leaves it unset).
  static test::RunResult train(const std::string& name, const std::string& matmul, std::vector<std::string> sets,
                               const std::string& arch = "llama") {
    std::vector<std::string> args = matmul.empty() ? std::vector<std::string>{"-u", "SEGTRAIN_CPU_MATMUL"}
                                                   : std::vector<std::string>{"SEGTRAIN_CPU_MATMUL=" + matmul};
    for (const std::string& a : {kBin, std::string("train"), tiny_run_config(name, {.arch = arch}),
                                 std::string("--set"), std::string("train.budget.tokens=1500")})
      args.push_back(a);
    args.insert(args.end(), sets.begin(), sets.end());
    return run("env", args);
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

TEST_F(CpuMatmulRun, AnUnknownChoiceIsRefusedNamingTheVariable) {
  const auto refused = train("bad-choice", "fp16", {"--set", "train.precision=bf16"});
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("SEGTRAIN_CPU_MATMUL=fp16: expected auto, bf16 or fp32"), std::string::npos)
      << refused.err;
  EXPECT_EQ(refused.err.find("Exception raised"), std::string::npos) << "a C++ backtrace: " << refused.err;
}

}  // namespace
}  // namespace segtrain
