// The project's CUDA kernels that no GPU has run yet (SEGTRAIN_FUSED_KERNELS=all) against the ATen calls they
// replace, as JSON on stdout, at GPT-2 medium's shapes in bf16 (8,192 tokens a micro-batch), each kernel's rows
// and a step's total:
//   bias gradient        ATen's sum over the tokens (what its linear's backward runs for a bias; with
//                        gelu_backward before it for fc) against kernels/linear.h's column-sum kernels, at the
//                        four biased projections a block (qkv 3,072, proj 1,024, fc 4,096 with GELU, fc_out 1,024),
//                        a step of 24 blocks
//   residual LayerNorm   ATen's add and LayerNorm, forward and backward (the gradients of x, branch, weight and
//                        bias from upstream gradients of the sum and the norm, as the block's autograd sums them)
//                        against kernels/residual_norm.h's fused node, at GPT-2 medium's 1,024, a step of 47 (each
//                        block's ln2 and every ln1 but the first's)
//   residual RMSNorm     the add and the default RMSNorm (ATen's fused op on CUDA) against the node, at
//                        Llama-3.2-1B's 2,048, a step of 32 (its 16 blocks' ln2, 15 ln1 and the final norm)
// Each figure is the median of 7 samples of 20 calls between device synchronisations, the two sides
// interleaved.
//   kernel_bench [--device cuda|cpu]   (default cuda)
// On CUDA without a visible GPU (or a build without CUDA) it prints {"benchmark": ..., "skipped": why}. With
// --device cpu it times the same calls at a small shape, where both sides are ATen's: a check that the bench
// runs (bench/tests/kernel_bench_test.py), not a figure.
#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <torch/autograd.h>

#include "kernels/linear.h"
#include "kernels/layer_norm.h"
#include "kernels/residual_norm.h"
#include "kernels/rms_norm.h"

namespace {

using Clock = std::chrono::steady_clock;

void synchronize(const at::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

// A value as a JSON number, or null where it is not finite (a kernel's NaN would make the whole output unreadable).
std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", value);
  return text;
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

// A step's row: the kernel's figures for a step of `model`, `count` saying how many calls of how many blocks
// (its case ends " blocks)", which bench/summarize.py reads as a step's row).
std::string step_row(const char* kernel, const char* model, const std::string& count, double aten_ms,
                     double kernel_ms) {
  char row[320];
  std::snprintf(row, sizeof row,
                R"json({"kernel": "%s", "case": "a %s step (%s)", "aten_ms": %.4f, "kernel_ms": %.4f, "ratio": %.3f})json",
                kernel, model, count.c_str(), aten_ms, kernel_ms, aten_ms / kernel_ms);
  return row;
}

// One residual add and the norm after it (LayerNorm where `centered`, else RMSNorm), forward and backward,
// the default path's (the add, then kernels/layer_norm.h's or kernels/rms_norm.h's call) against the fused
// node: its row and the step's (`norms` of them over `blocks` blocks).
std::string residual_norm_rows(const at::Device& device, int64_t tokens, int64_t cols, int64_t norms, int64_t blocks,
                               at::ScalarType dtype, bool centered, const char* model) {
  const auto options = at::TensorOptions().device(device).dtype(dtype);
  const auto x = at::randn({tokens, cols}, options), branch = at::randn({tokens, cols}, options);
  const auto w0 = at::randn({cols}, options);
  const at::Tensor b0 = centered ? at::randn({cols}, options) : at::Tensor();
  const auto up_sum = at::randn({tokens, cols}, options), up_normed = at::randn({tokens, cols}, options);
  at::Tensor aten_dx, kernel_dx;
  const auto pass = [&](bool fused) {
    auto xs = x.detach().requires_grad_(), bs = branch.detach().requires_grad_();
    auto w = w0.detach().requires_grad_();
    at::Tensor b = centered ? b0.detach().requires_grad_() : at::Tensor();
    segtrain::kernels::ResidualNorm out;
    if (fused) {
      out = centered ? segtrain::kernels::add_layer_norm_fused(xs, bs, w, b, 1e-5)
                     : segtrain::kernels::add_rms_norm_fused(xs, bs, w, 1e-5);
    } else {
      out.sum = xs + bs;
      out.normed = centered ? segtrain::kernels::layer_norm(out.sum, w, b, 1e-5, segtrain::kernels::NormReader::matmul)
                            : segtrain::kernels::rms_norm(out.sum, w, 1e-5);
    }
    std::vector<at::Tensor> inputs{xs, bs, w};
    if (centered) inputs.push_back(b);
    const auto grads = torch::autograd::grad({out.sum, out.normed}, inputs, {up_sum, up_normed});
    (fused ? kernel_dx : aten_dx) = grads[0];
  };
  double aten_ms = 0, kernel_ms = 0;
  for (int round = 0; round < 2; ++round) {
    aten_ms = time_ms(device, [&] { pass(false); });
    kernel_ms = time_ms(device, [&] { pass(true); });
  }
  const double difference =
      ((aten_dx.to(at::kDouble) - kernel_dx.to(at::kDouble)).abs().max() / aten_dx.to(at::kDouble).abs().max())
          .item<double>();
  // Bytes the fused pair must move at least: forward x and branch read, the sum and the norm written;
  // backward both upstream gradients and the sum read (twice: the row's gradient and the weight's sums), d x written.
  const double bytes = static_cast<double>(tokens * cols * x.element_size()) * (4 + 6);
  const char* kernel = centered ? "residual LayerNorm" : "residual RMSNorm";
  char row[640];
  std::snprintf(row, sizeof row,
                R"({"kernel": "%s", "case": "one add and norm", "tokens": %lld, "cols": %lld, "aten_ms": %.4f, )"
                R"("kernel_ms": %.4f, "ratio": %.3f, "kernel_gb_per_s": %.1f, "largest_relative_difference": %s})",
                kernel, static_cast<long long>(tokens), static_cast<long long>(cols), aten_ms, kernel_ms,
                aten_ms / kernel_ms, bytes / (kernel_ms * 1e6), json_number(difference).c_str());
  const std::string count = std::to_string(norms) + " norms of " + std::to_string(blocks) + " blocks";
  return std::string(row) + ", " + step_row(kernel, model, count, aten_ms * static_cast<double>(norms),
                                            kernel_ms * static_cast<double>(norms));
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = "cuda";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) device_name = argv[++i];
    else {
      std::cerr << "kernel_bench: unknown argument " << a << " (expected --device cuda|cpu)\n";
      return 2;
    }
  }
  if (device_name != "cuda" && device_name != "cpu") {
    std::cerr << "kernel_bench: --device " << device_name << ": expected cuda or cpu\n";
    return 2;
  }
  const bool cuda = device_name == "cuda";
  if (cuda && (!SEGTRAIN_WITH_CUDA || !torch::cuda::is_available())) {
    std::cout << R"({"benchmark": "gpu_kernels", "skipped": ")"
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
                  R"({"kernel": "bias gradient", "case": "%s", "tokens": %lld, "cols": %lld, "gelu": %s, "aten_ms": %.4f, "kernel_ms": %.4f, )"
                  R"("ratio": %.3f, "aten_gb_per_s": %.1f, "kernel_gb_per_s": %.1f, "largest_relative_difference": %s})",
                  c.name, static_cast<long long>(tokens), static_cast<long long>(cols), c.gelu ? "true" : "false",
                  aten_ms, kernel_ms, aten_ms / kernel_ms, bytes / (aten_ms * 1e6), bytes / (kernel_ms * 1e6),
                  json_number(difference).c_str());
    rows += std::string(rows.empty() ? "" : ", ") + row;
  }
  rows += ", " + step_row("bias gradient", "GPT-2 medium", std::to_string(layers) + " blocks", aten_step, kernel_step);
  // Each block's ln2 and every ln1 but the first's (GPT-2's final LayerNorm keeps autocast's fp32: no node).
  rows += ", " + residual_norm_rows(device, tokens, cuda ? 1024 : 64, 2 * layers - 1, layers, dtype, /*centered=*/true,
                                    "GPT-2 medium");
  // Llama-3.2-1B's width and 16 blocks (its micro-batches of 4 x 4,096 tokens are twice these), its final RMSNorm too.
  rows += ", " + residual_norm_rows(device, tokens, cuda ? 2048 : 128, 2 * 16, 16, dtype, /*centered=*/false,
                                    "Llama-3.2-1B");
  std::cout << R"({"benchmark": "gpu_kernels", "device": ")" << device_name << R"(", "dtype": ")"
            << c10::toString(dtype) << R"(", "setup": "bias gradient: ATen's sum over the tokens (with gelu_backward )"
            << R"(before it for fc) against kernels/linear.h's column-sum kernels; residual LayerNorm and RMSNorm: )"
            << R"(the add and the default norm, forward and backward, against kernels/residual_norm.h's node; median )"
            << R"(of 7 samples of 20 calls", "results": [)" << rows << "]}\n";
  return 0;
}
