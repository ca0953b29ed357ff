// The residual add fused with the norm after it (kernels/residual_norm.h): the kernels' per-element
// formulas (kernels/residual_norm_element.h, run here on the host with a row's plain fp32 sums)
// against LayerNorm, RMSNorm and their gradients in double; the autograd node's wiring on the CPU
// (where ATen's LayerNorm and its backward, or RMSNorm's formula in fp32 ATen ops, stand in for the
// kernels) against ATen's add and LayerNorm bit for bit, and against RMSNorm of the rounded sum and
// its gradients in double, with either output unused, frozen or absent parameters; and what the
// dispatch takes on the CPU. On a GPU the gpu suite runs the kernels themselves (tests/gpu,
// FusedKernels.ResidualNorm...).
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/forward_paths.h"
#include "kernels/residual_norm.h"
#include "kernels/residual_norm_element.h"
#include "kernels/rms_norm.h"

namespace segtrain::kernels {
namespace {

constexpr double kEps = 1e-5;

// One row as the kernels compute it, in fp32: the statistics from two passes of plain sums, then
// the output and the input gradient per element.
struct RowResult {
  std::vector<float> normed, dx;
};
RowResult kernel_row(const std::vector<float>& s, const std::vector<float>& w, const std::vector<float>& b,
                     const std::vector<float>& dy, const std::vector<float>& d_sum, bool centered = true) {
  const auto d = static_cast<float>(s.size());
  float total = 0.0f;
  for (float v : s) total += v;
  const float mean = centered ? total / d : 0.0f;
  float squares = 0.0f;
  for (float v : s) squares += (v - mean) * (v - mean);
  const float rstd = 1.0f / std::sqrt(squares / d + static_cast<float>(kEps));
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (size_t i = 0; i < s.size(); ++i) {
    sum_g += dy[i] * w[i];
    sum_gx += dy[i] * w[i] * layer_norm_normalized(s[i], mean, rstd);
  }
  RowResult out;
  for (size_t i = 0; i < s.size(); ++i) {
    out.normed.push_back(layer_norm_output(s[i], mean, rstd, w[i], b[i]));
    out.dx.push_back(layer_norm_input_gradient(dy[i] * w[i], layer_norm_normalized(s[i], mean, rstd),
                                               centered ? sum_g / d : 0.0f, sum_gx / d, rstd, d_sum[i]));
  }
  return out;
}

std::vector<float> values(const at::Tensor& t) {
  const auto f = t.to(at::kFloat).contiguous();
  return {f.const_data_ptr<float>(), f.const_data_ptr<float>() + f.numel()};
}

TEST(ResidualLayerNorm, TheKernelsFormulasAreLayerNormAndItsGradientInDouble) {
  at::manual_seed(5);
  const int64_t rows = 24, d = 96;
  // Rows far from zero mean and of different scales: the two-pass variance must hold them.
  const auto s = at::randn({rows, d}) * at::linspace(0.05, 30, rows).unsqueeze(1) + at::linspace(-20, 20, rows).unsqueeze(1);
  const auto w = at::randn({d}), b = at::randn({d}), dy = at::randn({rows, d}), d_sum = at::randn({rows, d});
  auto [y64, mean64, rstd64] = at::native_layer_norm(s.to(at::kDouble), {d}, w.to(at::kDouble), b.to(at::kDouble), kEps);
  auto grads64 = at::native_layer_norm_backward(dy.to(at::kDouble), s.to(at::kDouble), {d}, mean64, rstd64,
                                                w.to(at::kDouble), b.to(at::kDouble), {true, false, false});
  const auto dx64 = std::get<0>(grads64) + d_sum.to(at::kDouble);
  double worst_y = 0, worst_dx = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const RowResult got = kernel_row(values(s[r]), values(w), values(b), values(dy[r]), values(d_sum[r]));
    const auto y = at::tensor(got.normed).to(at::kDouble), dx = at::tensor(got.dx).to(at::kDouble);
    // Relative to the row's scale (|w| + |b| for the output, the gradient's terms for d x) and to its
    // conditioning: s - mean in fp32 carries the rounding of |mean| / std, as any fp32 LayerNorm's does.
    const double conditioning = 1 + std::abs(mean64[r].item<double>()) * rstd64[r].item<double>();
    const double y_scale = (w.abs() + b.abs()).max().item<double>() * conditioning;
    const double dx_scale = (rstd64[r].item<double>() * (dy[r] * w).abs().max().item<double>() * conditioning) +
                            d_sum[r].abs().max().item<double>();
    worst_y = std::max(worst_y, (y - y64[r]).abs().max().item<double>() / y_scale);
    worst_dx = std::max(worst_dx, (dx - dx64[r]).abs().max().item<double>() / dx_scale);
  }
  // fp32 rounding of sums over 96 values, a few units of 2^-24 times the terms' count.
  EXPECT_LT(worst_y, 1e-5);
  EXPECT_LT(worst_dx, 1e-5);
}

// RMSNorm of s in double, y = s / sqrt(mean(s^2) + eps) w, and the gradients of sum(u_sum s + u_y y)
// with respect to s and w (autograd in double): what the fused RMSNorm node must compute.
struct RmsReference {
  at::Tensor y, ds, dw;
};
RmsReference rms_reference(const at::Tensor& s, const at::Tensor& w, const at::Tensor& u_sum, const at::Tensor& u_y) {
  auto sd = s.to(at::kDouble).detach().requires_grad_();
  auto wd = w.defined() ? w.to(at::kDouble).detach().requires_grad_() : at::ones({s.size(-1)}, at::kDouble);
  const auto y = sd * at::rsqrt(sd.square().mean(-1, true) + kEps) * wd;
  at::Tensor loss = (y * (u_y.defined() ? u_y.to(at::kDouble) : at::zeros_like(y))).sum();
  if (u_sum.defined()) loss = loss + (sd * u_sum.to(at::kDouble)).sum();
  const auto g = w.defined() ? torch::autograd::grad({loss}, {sd, wd}) : torch::autograd::grad({loss}, {sd});
  return {y.detach(), g[0], w.defined() ? g[1] : at::Tensor()};
}

TEST(ResidualRmsNorm, TheKernelsFormulasAreRmsNormAndItsGradientInDouble) {
  at::manual_seed(6);
  const int64_t rows = 16, d = 128;
  const auto s = at::randn({rows, d}) * at::linspace(0.05, 30, rows).unsqueeze(1) + 0.5;
  const auto w = at::randn({d}), dy = at::randn({rows, d}), d_sum = at::randn({rows, d});
  const auto ref = rms_reference(s, w, d_sum, dy);
  double worst_y = 0, worst_dx = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const RowResult got = kernel_row(values(s[r]), values(w), std::vector<float>(d, 0.0f), values(dy[r]),
                                     values(d_sum[r]), /*centered=*/false);
    const auto y = at::tensor(got.normed).to(at::kDouble), dx = at::tensor(got.dx).to(at::kDouble);
    worst_y = std::max(worst_y, ((y - ref.y[r]).abs() / (ref.y[r].abs().max() + 1e-30)).max().item<double>());
    worst_dx = std::max(worst_dx, ((dx - ref.ds[r]).abs() / ref.ds[r].abs().max()).max().item<double>());
  }
  EXPECT_LT(worst_y, 1e-5);
  EXPECT_LT(worst_dx, 1e-5);
}

TEST(ResidualRmsNorm, TheNodeIsRmsNormOfTheRoundedSumAndItsGradients) {
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    const double unit = dtype == at::kFloat ? std::ldexp(1.0, -23) : std::ldexp(1.0, -8);
    at::manual_seed(4);
    const auto x0 = at::randn({2, 5, 64}).to(dtype), branch0 = at::randn({2, 5, 64}).to(dtype);
    const auto w0 = (at::randn({64}) * 0.5 + 1).to(dtype);
    const auto u_sum = at::randn({2, 5, 64}).to(dtype), u_y = at::randn({2, 5, 64}).to(dtype);
    for (const auto& used : std::vector<std::vector<std::string>>{{"sum", "normed"}, {"normed"}, {"sum"}})
      for (const int weight : {0, 1, 2}) {  // trained, frozen, none
        std::string what = std::string(c10::toString(dtype)) + ", upstream of";
        for (const auto& u : used) what += " " + u;
        what += weight == 0 ? ", trained weight" : weight == 1 ? ", frozen weight" : ", no weight";
        auto x = x0.clone().requires_grad_(), branch = branch0.clone().requires_grad_();
        at::Tensor w = weight == 2 ? at::Tensor() : w0.clone().requires_grad_(weight == 0);
        const auto out = add_rms_norm_fused(x, branch, w, kEps);
        ASSERT_TRUE(at::equal(out.sum, x0 + branch0)) << what;
        std::vector<at::Tensor> outputs, upstream, inputs{x, branch};
        const bool uses_sum = used.front() == "sum", uses_normed = used.back() == "normed";
        if (uses_sum) outputs.push_back(out.sum), upstream.push_back(u_sum);
        if (uses_normed) outputs.push_back(out.normed), upstream.push_back(u_y);
        if (weight == 0) inputs.push_back(w);
        const auto g = torch::autograd::grad(outputs, inputs, upstream, false, false, /*allow_unused=*/true);
        const auto ref = rms_reference(out.sum.detach(), weight == 2 ? at::Tensor() : w0,
                                       uses_sum ? u_sum : at::Tensor(), uses_normed ? u_y : at::Tensor());
        // Computed in fp32 and rounded once: within a unit of each value, plus fp32's rounding of the row's sums.
        const auto y_error = (out.normed.to(at::kDouble) - ref.y).abs();
        EXPECT_FALSE((y_error > ref.y.abs() * 2 * unit + 1e-5 * ref.y.abs().max()).any().item<bool>())
            << what << ": normed off by " << y_error.max().item<double>();
        EXPECT_TRUE(at::equal(g[0], g[1])) << what << ": x's and branch's gradients differ";
        EXPECT_EQ(g[0].scalar_type(), dtype) << what;
        const double largest = ref.ds.abs().max().item<double>();
        EXPECT_LE((g[0].to(at::kDouble) - ref.ds).abs().max().item<double>(), largest * (2 * unit + 1e-5)) << what << ": d x";
        if (weight == 0) {
          ASSERT_EQ(g[2].defined(), uses_normed) << what;
          if (uses_normed) {
            EXPECT_LE((g[2].to(at::kDouble) - ref.dw).abs().max().item<double>(),
                      ref.dw.abs().max().item<double>() * (2 * unit + 1e-5))
                << what << ": d w";
          }
        }
      }
  }
}

TEST(ResidualRmsNorm, TheCpuTakesTheComposite) {
  const auto x = at::randn({2, 3, 32}), branch = at::randn({2, 3, 32}), w = at::randn({32});
  start_recording_paths();
  const auto out = add_rms_norm(x, branch, w, kEps);
  const uint32_t paths = stop_recording_paths();
  EXPECT_FALSE(paths & static_cast<uint32_t>(ForwardPath::residual_rms_norm_kernel));
  EXPECT_TRUE(paths & static_cast<uint32_t>(ForwardPath::rms_norm_composite));
  EXPECT_TRUE(at::equal(out.sum, x + branch));
  EXPECT_TRUE(at::equal(out.normed, rms_norm_composite(x + branch, w, kEps)));
  EXPECT_EQ(describe_paths(static_cast<uint32_t>(ForwardPath::residual_rms_norm_kernel)),
            "residual add + RMSNorm fused kernel");
  try {
    add_rms_norm_fused(x, branch.to(at::kBFloat16), w, kEps);
    ADD_FAILURE() << "took a branch of another dtype";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("the fused residual add and norm does not apply: it takes x, branch, weight "
                                         "and bias of one dtype"),
              std::string::npos)
        << e.what();
  }
}

// The node's and the composite's outputs and the gradients of x, branch, weight and bias for
// upstream gradients of the outputs named in `used` ("sum", "normed" or both).
std::vector<at::Tensor> run(bool fused, const at::Tensor& x0, const at::Tensor& branch0, const at::Tensor& w0,
                            const at::Tensor& b0, const std::vector<std::string>& used, bool train_parameters) {
  auto x = x0.clone().requires_grad_(), branch = branch0.clone().requires_grad_();
  at::Tensor w = w0.defined() ? w0.clone().requires_grad_(train_parameters) : w0;
  at::Tensor b = b0.defined() ? b0.clone().requires_grad_(train_parameters) : b0;
  at::Tensor sum, normed;
  if (fused) {
    auto out = add_layer_norm_fused(x, branch, w, b, kEps);
    sum = out.sum, normed = out.normed;
  } else {
    sum = x + branch;
    normed = at::layer_norm(sum, {sum.size(-1)}, w, b, kEps);
  }
  std::vector<at::Tensor> outputs, upstream, inputs{x, branch};
  at::manual_seed(9);
  for (const auto& name : used) {
    outputs.push_back(name == "sum" ? sum : normed);
    upstream.push_back(at::randn(sum.sizes()).to(sum.scalar_type()));
  }
  if (w.defined() && train_parameters) inputs.push_back(w);
  if (b.defined() && train_parameters) inputs.push_back(b);
  auto grads = torch::autograd::grad(outputs, inputs, upstream, /*retain_graph=*/false, /*create_graph=*/false,
                                     /*allow_unused=*/true);
  std::vector<at::Tensor> all{sum.detach(), normed.detach()};
  all.insert(all.end(), grads.begin(), grads.end());
  return all;
}

TEST(ResidualLayerNorm, TheNodeEqualsAtensAddAndLayerNormForwardAndBackward) {
  // On the CPU the node computes with ATen's add, LayerNorm and LayerNorm backward, so everything must
  // be equal bit for bit: what differs is only the wiring (saved tensors, which gradient goes where).
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    at::manual_seed(3);
    const auto x = at::randn({2, 5, 64}).to(dtype), branch = at::randn({2, 5, 64}).to(dtype);
    const auto w = (at::randn({64}) * 0.5 + 1).to(dtype), b = (at::randn({64}) * 0.1).to(dtype);
    for (const auto& used : std::vector<std::vector<std::string>>{{"sum", "normed"}, {"normed"}, {"sum"}})
      for (const int parameters : {0, 1, 2})  // weight and bias, none, a bias alone (the node's inputs shift)
        for (const bool trained : {true, false}) {
          const at::Tensor pw = parameters == 0 ? w : at::Tensor(), pb = parameters != 1 ? b : at::Tensor();
          const auto got = run(true, x, branch, pw, pb, used, trained), want = run(false, x, branch, pw, pb, used, trained);
          std::string what = std::string(c10::toString(dtype)) + ", upstream of";
          for (const auto& u : used) what += " " + u;
          what += parameters == 1 ? ", no parameters"
                  : std::string(trained ? ", trained " : ", frozen ") + (parameters == 0 ? "weight and bias" : "bias alone");
          ASSERT_EQ(got.size(), want.size()) << what;
          const char* names[] = {"sum", "normed", "d x", "d branch", "d weight", "d bias"};
          for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_EQ(got[i].defined(), want[i].defined()) << what << ": " << names[i];
            if (!got[i].defined()) continue;
            EXPECT_EQ(got[i].scalar_type(), dtype) << what << ": " << names[i];
            EXPECT_TRUE(at::equal(got[i], want[i])) << what << ": " << names[i] << " differs by "
                                                    << (got[i].to(at::kDouble) - want[i].to(at::kDouble)).abs().max().item<double>();
          }
        }
  }
}

TEST(ResidualLayerNorm, ASecondDerivativeIsRefused) {
  auto x = at::randn({3, 16}).requires_grad_(), branch = at::randn({3, 16}).requires_grad_();
  auto out = add_layer_norm_fused(x, branch, at::ones({16}), at::zeros({16}), kEps);
  const auto loss = (out.normed * out.normed).sum() + out.sum.sum();
  try {
    torch::autograd::grad({loss}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true);
    FAIL() << "a backward that records a graph went through";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no second derivative"), std::string::npos) << e.what();
  }
}

// `rows` rows of 8 fp32 values (32 bytes) as one row expanded: sizes without the memory.
at::Tensor many_rows(int64_t rows) { return at::zeros({1, 8}).expand({rows, 8}); }

TEST(ResidualLayerNorm, TheCpuTakesTheCompositeAndTheNodeSaysWhyNot) {
  const auto x = at::randn({2, 3, 32}), branch = at::randn({2, 3, 32});
  const auto w = at::ones({32}), b = at::zeros({32});
  start_recording_paths();
  const auto out = add_layer_norm(x, branch, w, b, kEps, NormReader::matmul);
  const uint32_t paths = stop_recording_paths();
  EXPECT_FALSE(paths & static_cast<uint32_t>(ForwardPath::residual_layer_norm_kernel));
  EXPECT_TRUE(paths & static_cast<uint32_t>(ForwardPath::layer_norm_fp32));
  EXPECT_TRUE(at::equal(out.sum, x + branch));
  EXPECT_TRUE(at::equal(out.normed, at::layer_norm(x + branch, {32}, w, b, kEps)));
  EXPECT_EQ(describe_paths(static_cast<uint32_t>(ForwardPath::residual_layer_norm_kernel)),
            "residual add + LayerNorm fused kernel");

  EXPECT_EQ(add_norm_fused_refusal(x, branch, w, b), "");
  EXPECT_EQ(add_norm_fused_refusal(x, branch, at::Tensor(), at::Tensor()), "");
  const std::vector<std::pair<std::vector<at::Tensor>, std::string>> refused{
      {{x, branch.to(at::kBFloat16), w, b}, "of one dtype and device; x is Float on cpu, branch BFloat16 on cpu"},
      {{x, branch, w.to(at::kBFloat16), b}, "of one dtype and device; x is Float on cpu, weight BFloat16 on cpu"},
      {{x, branch.slice(-1, 0, 16), w, b}, "of one shape"},
      {{x, branch, at::ones({16}), b}, "of x's last dimension"},
      {{x.to(at::kInt), branch.to(at::kInt), at::Tensor(), at::Tensor()}, "fp32, bf16 or fp16"},
      {{at::randn({2, 6}), at::randn({2, 6}), at::Tensor(), at::Tensor()}, "multiple of 16 bytes"},
      {{at::randn({2, 8192}), at::randn({2, 8192}), at::Tensor(), at::Tensor()}, "up to 16384"},
      // One block a row: 2^31 rows (a stride-0 view, no memory) are past a grid's x dimension.
      {{many_rows(int64_t{1} << 31), many_rows(int64_t{1} << 31), at::Tensor(), at::Tensor()},
       "at most 2^31 - 1 rows; got 2147483648"}};
  for (const auto& [t, words] : refused) {
    const std::string why = add_norm_fused_refusal(t[0], t[1], t[2], t[3]);
    EXPECT_NE(why.find(words), std::string::npos) << why;
    try {
      add_layer_norm_fused(t[0], t[1], t[2], t[3], kEps);
      ADD_FAILURE() << "took tensors it refuses: " << why;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(add_norm_fused_refusal(many_rows(0x7fffffff), many_rows(0x7fffffff), at::Tensor(), at::Tensor()), "");
  // 8,192 bf16 values fill a row's registers exactly: taken.
  EXPECT_EQ(add_norm_fused_refusal(at::randn({2, 8192}).to(at::kBFloat16), at::randn({2, 8192}).to(at::kBFloat16),
                                         at::Tensor(), at::Tensor()),
            "");
}

}  // namespace
}  // namespace segtrain::kernels
