// The linears' bias gradients (kernels/linear.h), as JSON on stdout: ATen's sum over the tokens (what its
// linear's backward runs for a bias) against the project's column-sum kernel, and ATen's gelu_backward
// followed by that sum against the kernel that computes both from one read, at GPT-2 medium's four biased
// projections a block (8,192 tokens a micro-batch: qkv 3,072, proj 1,024, fc 4,096 with GELU, fc_out 1,024)
// in bf16; a step's total is 24 blocks' worth. Each figure is the median of 7 samples of 20 calls between
// device synchronisations, the two sides interleaved.
//   bias_gradient_kernel_bench [--device cuda|cpu]   (default cuda)
// On CUDA without a visible GPU (or a build without CUDA) it prints {"benchmark": ..., "skipped": why}. With
// --device cpu it times the same calls at a small shape, where both sides are ATen's: a check that the bench
// runs (bench/tests/bias_gradient_bench_test.py), not a figure.
#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "kernels/linear.h"

namespace {

using Clock = std::chrono::steady_clock;

void synchronize(const at::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

// Milliseconds a call: the median of `samples` samples of `calls` calls.
double time_ms(const at::Device& device, const std::function<void()>& call, int samples = 7, int calls = 20) {
  for (int i = 0; i < 3; ++i) call();  // first calls: the allocator's blocks, the kernels' loading
  std::vector<double> ms;
  for (int s = 0; s < samples; ++s) {
    synchronize(device);
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) call();
    synchronize(device);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / calls);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Case {
  const char* name;
  int64_t cols;
  bool gelu;
};

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = "cuda";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) device_name = argv[++i];
    else {
      std::cerr << "bias_gradient_kernel_bench: unknown argument " << a << " (expected --device cuda|cpu)\n";
      return 2;
    }
  }
  if (device_name != "cuda" && device_name != "cpu") {
    std::cerr << "bias_gradient_kernel_bench: --device " << device_name << ": expected cuda or cpu\n";
    return 2;
  }
  const bool cuda = device_name == "cuda";
  if (cuda && (!SEGTRAIN_WITH_CUDA || !torch::cuda::is_available())) {
    std::cout << R"({"benchmark": "gpu_bias_gradient", "skipped": ")"
              << (SEGTRAIN_WITH_CUDA ? "no CUDA device is visible" : "this build of segtrain has no CUDA") << "\"}\n";
    return 0;
  }
  const at::Device device(cuda ? at::kCUDA : at::kCPU);
  const int64_t tokens = cuda ? 8192 : 256;
  const int64_t layers = 24;
  const auto dtype = cuda ? at::kBFloat16 : at::kFloat;
  const std::vector<Case> cases = {{"qkv", 3072, false}, {"proj", 1024, false}, {"fc (GELU)", 4096, true},
                                   {"fc_out", 1024, false}};
  double aten_step = 0, kernel_step = 0;
  std::string rows;
  at::manual_seed(0);
  for (const Case& c : cases) {
    const int64_t cols = cuda ? c.cols : c.cols / 16;
    const auto options = at::TensorOptions().device(device).dtype(dtype);
    const auto dy = at::randn({tokens, cols}, options), pre = at::randn({tokens, cols}, options);
    at::Tensor aten_result, kernel_result;
    // ATen's side: what its linear's (and gelu's) backward run for the bias.
    const auto aten = [&] {
      aten_result = c.gelu ? at::gelu_backward(dy, pre, "tanh").sum(0) : dy.sum(0);
    };
    const auto kernel = [&] {
      kernel_result = c.gelu ? segtrain::kernels::gelu_bias_gradient(pre, dy, true).second
                             : segtrain::kernels::bias_gradient(dy);
    };
    double aten_ms = 0, kernel_ms = 0;
    for (int round = 0; round < 2; ++round) {  // interleaved: the second round's figures are kept
      aten_ms = time_ms(device, aten);
      kernel_ms = time_ms(device, kernel);
    }
    const double difference =
        ((aten_result.to(at::kDouble) - kernel_result.to(at::kDouble)).abs().max() /
         aten_result.to(at::kDouble).abs().max()).item<double>();
    // Bytes each side must move at least: the gradient read (and with GELU, pre read and d pre written).
    const double bytes = static_cast<double>(tokens * cols * dy.element_size()) * (c.gelu ? 3 : 1);
    aten_step += aten_ms * layers;
    kernel_step += kernel_ms * layers;
    char row[640];
    std::snprintf(row, sizeof row,
                  R"({"case": "%s", "tokens": %lld, "cols": %lld, "gelu": %s, "aten_ms": %.4f, "kernel_ms": %.4f, )"
                  R"("ratio": %.3f, "aten_gb_per_s": %.1f, "kernel_gb_per_s": %.1f, "largest_relative_difference": %.3g})",
                  c.name, static_cast<long long>(tokens), static_cast<long long>(cols), c.gelu ? "true" : "false",
                  aten_ms, kernel_ms, aten_ms / kernel_ms, bytes / (aten_ms * 1e6), bytes / (kernel_ms * 1e6),
                  difference);
    rows += std::string(rows.empty() ? "" : ", ") + row;
  }
  char step[320];
  std::snprintf(step, sizeof step,
                R"json({"case": "a GPT-2 medium step (%lld blocks)", "aten_ms": %.4f, "kernel_ms": %.4f, "ratio": %.3f})json",
                static_cast<long long>(layers), aten_step, kernel_step, aten_step / kernel_step);
  std::cout << R"({"benchmark": "gpu_bias_gradient", "device": ")" << device_name << R"(", "dtype": ")"
            << c10::toString(dtype) << R"(", "setup": "ATen's sum over the tokens (with gelu_backward before it for )"
            << R"(fc) against kernels/linear.h's column-sum kernels; median of 7 samples of 20 calls", "results": [)"
            << rows << ", " << step << "]}\n";
  return 0;
}
