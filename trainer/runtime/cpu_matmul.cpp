#include "trainer/runtime/cpu_matmul.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iomanip>
#include <limits>
#include <mutex>
#include <sstream>
#include <vector>

#include "common/error.h"
#include "common/log.h"

namespace segtrain::trainer {
namespace {

// A projection's GEMMs at a small batch: 128 tokens through a 512 -> 512 linear.
// Large enough that the timing is the kernel's, small enough that a slow bf16 kernel
// costs a fraction of a second before the early stop below.
constexpr int64_t kTokens = 128, kWidth = 512;
constexpr double kFlopsPerGemm = 2.0 * kTokens * kWidth * kWidth;
constexpr int kRepeats = 5;
// A bf16 call this many times slower than fp32's best is not worth timing further (a slow
// bf16 input-gradient was 50x slower than fp32: seconds a call at this shape on such a CPU).
constexpr double kGiveUpRatio = 20.0;
// fp32 is chosen only when bf16 is slower by more than this factor: the machines this is for
// are 7-50x apart, and a margin keeps a loaded machine's timing noise (one call preempted) from
// flipping the choice between a run and its resumption.
constexpr double kClearlySlower = 2.0;

double seconds_of(const std::function<at::Tensor()>& gemm) {
  const auto start = std::chrono::steady_clock::now();
  const at::Tensor out = gemm();
  (void)out.sum().item<double>();  // the result read, so nothing is left pending
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The forward (x W^T, as linear) and the input-gradient (dy W, a plain mm: the layout
// in which a slow bf16 kernel was 50x slower than its forward).
std::vector<std::function<at::Tensor()>> gemms(at::ScalarType dtype) {
  const auto options = at::TensorOptions().dtype(dtype);
  const at::Tensor x = at::randn({kTokens, kWidth}, options), w = at::randn({kWidth, kWidth}, options);
  const at::Tensor dy = at::randn({kTokens, kWidth}, options);
  return {[x, w] { return at::linear(x, w); }, [dy, w] { return at::mm(dy, w); }};
}

// Best time of each GEMM; with a limit, a first call slower than limit[i] stops the timing
// (that call's time stands for the rest). The best of several calls is the kernel's speed,
// whatever else the machine runs.
std::vector<double> best_times(at::ScalarType dtype, const std::vector<double>& limits) {
  std::vector<double> best;
  for (const auto& gemm : gemms(dtype)) {
    const size_t i = best.size();
    // Not timed: a library's first call of a kernel builds it (oneDNN compiles its AMX/AVX512
    // kernels at first use, tens of times one call), which is not the kernel's speed.
    (void)seconds_of(gemm);
    const double first = seconds_of(gemm);
    double b = first;
    if (limits.empty() || first <= limits[i])
      for (int r = 0; r < kRepeats; ++r) b = std::min(b, seconds_of(gemm));
    best.push_back(b);
  }
  return best;
}

double gflops(const std::vector<double>& times) {
  double total = 0;
  for (double t : times) total += t;
  return static_cast<double>(times.size()) * kFlopsPerGemm / std::max(total, 1e-9) / 1e9;
}

CpuMatmul choose() {
  if (const auto forced = forced_cpu_matmul()) return {*forced, CpuMatmulSource::environment, {}};
  CpuMatmul choice;
  choice.measured = time_cpu_gemms();
  choice.dtype = faster_cpu_matmul_dtype(choice.measured);
  return choice;
}

// The process's own choice once made, and the one a training run set over it.
std::mutex choice_mutex;
std::optional<CpuMatmul> own_choice, set_choice;

}  // namespace

CpuGemmTimes time_cpu_gemms() {
  const c10::InferenceMode no_autograd;  // timing the kernels, not autograd
  const std::vector<double> fp32 = best_times(at::kFloat, {});
  std::vector<double> limits;
  for (double t : fp32) limits.push_back(kGiveUpRatio * t);
  return CpuGemmTimes{gflops(best_times(at::kBFloat16, limits)), gflops(fp32)};
}

at::ScalarType faster_cpu_matmul_dtype(const CpuGemmTimes& times) {
  return times.bf16_gflops * kClearlySlower >= times.fp32_gflops ? at::kBFloat16 : at::kFloat;
}

std::optional<at::ScalarType> forced_cpu_matmul() {
  const char* set = std::getenv("SEGTRAIN_CPU_MATMUL");
  const std::string value = set ? set : "auto";
  if (value == "auto") return std::nullopt;
  if (const auto dtype = cpu_matmul_dtype(value)) return dtype;
  throw InputError("SEGTRAIN_CPU_MATMUL=" + value + ": expected auto, bf16 or fp32 (what bf16 autocast computes "
                   "its matmuls in on the CPU)");
}

const CpuMatmul& cpu_matmul(bool log_choice) {
  const std::lock_guard<std::mutex> lock(choice_mutex);
  if (set_choice) return *set_choice;  // set before any autocast begins, never beside one
  if (!own_choice) {
    own_choice = choose();
    if (log_choice) log::info(describe(*own_choice));
  }
  return *own_choice;
}

void set_cpu_matmul(const std::optional<CpuMatmul>& choice) {
  const std::lock_guard<std::mutex> lock(choice_mutex);
  set_choice = choice;
}

std::string cpu_matmul_name(at::ScalarType dtype) { return dtype == at::kBFloat16 ? "bf16" : "fp32"; }

std::optional<at::ScalarType> cpu_matmul_dtype(const std::string& name) {
  if (name == "bf16") return at::kBFloat16;
  if (name == "fp32") return at::kFloat;
  return std::nullopt;
}

std::string describe(const CpuMatmul& choice) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1);
  const bool bf16 = choice.dtype == at::kBFloat16;
  if (choice.source != CpuMatmulSource::measured) {
    out << "bf16 autocast on the CPU computes its matmuls in " << cpu_matmul_name(choice.dtype)
        << (choice.source == CpuMatmulSource::environment ? " (SEGTRAIN_CPU_MATMUL)"
            : choice.source == CpuMatmulSource::resumed   ? " as the run it resumes did (its trainer_state.json)"
                                                          : " as rank 0 does")
        << (bf16 ? "" : ", the weights stay as stored");
    return out.str();
  }
  const CpuGemmTimes& t = choice.measured;
  if (bf16) {
    out << "bf16 matmuls on the CPU (measured: bf16 " << t.bf16_gflops << " GFLOP/s, fp32 " << t.fp32_gflops << ")";
  } else {
    out << "this CPU's PyTorch has no fast bf16 GEMM (measured: bf16 " << t.bf16_gflops << " GFLOP/s, fp32 "
        << t.fp32_gflops << "): bf16 autocast computes its matmuls in fp32, the weights stay as stored "
        << "(SEGTRAIN_CPU_MATMUL=bf16 forces bf16)";
  }
  return out.str();
}

}  // namespace segtrain::trainer
