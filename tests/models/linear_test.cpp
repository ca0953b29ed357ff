// The linears' bias-gradient kernels (kernels/linear.h): GELU's gradient per element
// (kernels/gelu_element.h, run here on the host) against ATen's gelu_backward and the derivative in
// double; the kernels' split of the column sums (kernels/bias_gradient_plan.h) and their order of
// addition, replayed here on the host, against the sums in double; the autograd nodes' wiring on the
// CPU (where their sums are ATen's) against ATen's linear and gelu, forward and the three gradients;
// and what the dispatch takes on the CPU. On a GPU the gpu suite runs the kernels themselves
// (tests/gpu, FusedKernels.LinearBiasGradients...).
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <ATen/autocast_mode.h>

#include <cmath>
#include <string>

#include "common/error.h"
#include "kernels/bias_gradient_plan.h"
#include "kernels/forward_paths.h"
#include "kernels/gelu_element.h"
#include "kernels/linear.h"

namespace segtrain::kernels {
namespace {

double unit_of(at::ScalarType t) {
  return t == at::kFloat ? std::ldexp(1.0, -23) : t == at::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
}

// The kernels' column sums in their order (bias_gradient_plan.h), on the host, rounded to g's dtype.
at::Tensor replay_column_sums(const at::Tensor& g, const ColumnSumPlan& plan) {
  const auto f = g.to(at::kFloat).contiguous();
  const float* p = f.const_data_ptr<float>();
  auto out = at::empty({plan.cols}, at::kFloat);
  for (int64_t c = 0; c < plan.cols; ++c) {
    float total = 0.0f;
    for (int64_t s = 0; s < plan.splits; ++s) {
      const int64_t begin = s * plan.rows_per_split, end = std::min(plan.rows, begin + plan.rows_per_split);
      float block = 0.0f;
      for (int y = 0; y < kRowThreads; ++y) {
        float acc = 0.0f;  // thread y's rows
        for (int64_t r = begin + y; r < end; r += kRowThreads) acc += p[r * plan.cols + c];
        block = y == 0 ? acc : block + acc;
      }
      total = s == 0 ? block : total + block;
    }
    out[c] = total;
  }
  return out.to(g.scalar_type());
}

// d/dx gelu(x) in double: Phi + x phi, or the tanh approximation's derivative.
at::Tensor gelu_derivative_in_double(const at::Tensor& x, bool tanh) {
  const auto d = x.to(at::kDouble);
  if (!tanh) return 0.5 * (1 + at::erf(d / std::sqrt(2.0))) + d * at::exp(-0.5 * d * d) / std::sqrt(2 * M_PI);
  const double beta = std::sqrt(2 / M_PI), kappa = 0.044715;
  const auto t = at::tanh(beta * (d + kappa * d * d * d));
  return 0.5 * (1 + t) + 0.5 * d * (1 - t * t) * beta * (1 + 3 * kappa * d * d);
}

TEST(LinearKernels, GeluGradientsAreAtensFormulas) {
  // A spread of pre-activations, where the tails saturate (|x| > 10) and around 0.
  auto x = at::cat({at::linspace(-12, 12, 2401), at::randn({4000}) * 3, at::tensor({0.0f, 1e-30f, -1e-30f})});
  const auto dy = at::randn(x.sizes());
  for (const bool tanh : {true, false}) {
    auto mine = at::empty_like(x);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float xi = x[i].item<float>(), di = dy[i].item<float>();
      mine[i] = tanh ? gelu_tanh_gradient(xi, di) : gelu_erf_gradient(xi, di);
    }
    const auto aten = at::gelu_backward(dy, x, tanh ? "tanh" : "none");
    const auto exact = gelu_derivative_in_double(x, tanh) * dy.to(at::kDouble);
    const auto scale = exact.abs() + dy.to(at::kDouble).abs();  // gelu' is within [-0.13, 1.13]
    const double to_aten = ((mine.to(at::kDouble) - aten.to(at::kDouble)).abs() / scale).max().item<double>();
    const double to_exact = ((mine.to(at::kDouble) - exact).abs() / scale).max().item<double>();
    // ATen's CPU kernel takes its own vectorised tanh, erf and exp: a few more units apart.
    EXPECT_LT(to_aten, 16 * unit_of(at::kFloat)) << (tanh ? "tanh" : "erf");
    EXPECT_LT(to_exact, 8 * unit_of(at::kFloat)) << (tanh ? "tanh" : "erf");
  }
}

TEST(LinearKernels, ThePlanCoversEveryRowOnceWithinTheGridsLimits) {
  struct Shape {
    int64_t rows, cols, bytes;
    bool aligned;
    int expected_pack;
  };
  for (const Shape s : {Shape{8192, 3072, 2, true, 8}, Shape{8192, 1024, 2, true, 8}, Shape{8192, 4096, 2, true, 8},
                        Shape{8192, 4096, 4, true, 4}, Shape{7, 333, 2, true, 1}, Shape{8192, 1024, 2, false, 1},
                        Shape{1, 8, 2, true, 8}, Shape{int64_t{1} << 31, 1, 4, true, 1}, Shape{100, 12, 4, true, 4}}) {
    const ColumnSumPlan plan = plan_column_sums(s.rows, s.cols, s.bytes, s.aligned, 132);
    const std::string what = std::to_string(s.rows) + " x " + std::to_string(s.cols);
    EXPECT_EQ(plan.pack, s.expected_pack) << what;
    EXPECT_GE(plan.column_tiles * kColumnThreads * plan.pack, s.cols) << what;
    EXPECT_LT((plan.column_tiles - 1) * kColumnThreads * plan.pack, s.cols) << what;
    EXPECT_GE(plan.splits * plan.rows_per_split, s.rows) << what;           // every row in a split
    EXPECT_LT((plan.splits - 1) * plan.rows_per_split, s.rows) << what;     // and no split empty
    EXPECT_LE(plan.splits, 65535) << what;                                  // the grid's y
    EXPECT_GE(plan.rows_per_split, std::min<int64_t>(s.rows, 4 * kRowThreads)) << what;  // 4 rows a thread
  }
  // GPT-2 medium's qkv bias on 132 multiprocessors: 12 column tiles, about 8 blocks a multiprocessor.
  const ColumnSumPlan qkv = plan_column_sums(8192, 3072, 2, true, 132);
  EXPECT_EQ(qkv.column_tiles, 12);
  EXPECT_NEAR(static_cast<double>(qkv.column_tiles * qkv.splits), 8 * 132, 12);
}

TEST(LinearKernels, TheKernelsOrderOfAdditionIsWithinFp32RoundingOfTheSumInDouble) {
  at::manual_seed(21);
  for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    // A mean far from zero, as a bias's gradient summed over 8,192 tokens can be.
    const auto g = (at::randn({8192, 96}) + 3.0).to(dtype);
    const ColumnSumPlan plan = plan_column_sums(8192, 96, g.element_size(), true, 132);
    const auto replayed = replay_column_sums(g, plan);
    ASSERT_EQ(replayed.scalar_type(), dtype);
    const auto exact = g.to(at::kDouble).sum(0);
    // The longest chain of fp32 additions: a thread's rows, the block's 8 sums, the splits.
    const double chain = static_cast<double>(plan.rows_per_split / kRowThreads + kRowThreads + plan.splits);
    const auto bound = g.to(at::kDouble).abs().sum(0) * chain * std::ldexp(1.0, -24) + exact.abs() * unit_of(dtype);
    const auto over = (replayed.to(at::kDouble) - exact).abs() > bound;
    EXPECT_FALSE(over.any().item<bool>()) << c10::toString(dtype) << ": largest difference "
                                          << (replayed.to(at::kDouble) - exact).abs().max().item<double>();
    // What the nodes compute on the CPU (ATen's sum in fp32) meets the same bound.
    const auto aten = bias_gradient(g);
    ASSERT_EQ(aten.scalar_type(), dtype);
    EXPECT_FALSE(((aten.to(at::kDouble) - exact).abs() > bound).any().item<bool>()) << c10::toString(dtype);
  }
}

TEST(LinearKernels, TheGeluKernelsRowsAndSumsAreAtensGradientAndItsSum) {
  at::manual_seed(22);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    for (const bool tanh : {true, false}) {
      const auto pre = (at::randn({640, 48}) * 2).to(dtype), dy = at::randn({640, 48}).to(dtype);
      // The kernel's rows: each element's gradient in fp32, rounded once to the dtype.
      const auto p = pre.to(at::kFloat).contiguous(), d = dy.to(at::kFloat).contiguous();
      auto rows = at::empty_like(p);
      for (int64_t i = 0; i < p.numel(); ++i) {
        const float a = p.const_data_ptr<float>()[i], b = d.const_data_ptr<float>()[i];
        rows.mutable_data_ptr<float>()[i] = tanh ? gelu_tanh_gradient(a, b) : gelu_erf_gradient(a, b);
      }
      rows = rows.to(dtype);
      const auto [aten_rows, aten_sums] = gelu_bias_gradient(pre, dy, tanh);  // the CPU: ATen's ops
      const std::string what = std::string(c10::toString(dtype)) + (tanh ? " tanh" : " erf");
      const auto apart = (rows.to(at::kDouble) - aten_rows.to(at::kDouble)).abs();
      // Both round one fp32 value to the dtype, the fp32 values a few units of the terms apart (the
      // terms are as large as dy: gelu' is within [-0.13, 1.13]); so one unit of the dtype apart at most
      // (a unit: up to 2^-7 of a bf16 value).
      const auto bound = aten_rows.to(at::kDouble).abs() * (dtype == at::kFloat ? 0 : 2) * unit_of(dtype) +
                         dy.to(at::kDouble).abs() * 16 * unit_of(at::kFloat);
      EXPECT_FALSE((apart > bound).any().item<bool>()) << what << ": largest " << apart.max().item<double>();
      // The sums are of the rounded rows (what ATen's sum of d pre adds), in the kernel's order.
      const auto replayed = replay_column_sums(rows, plan_column_sums(640, 48, rows.element_size(), true, 132));
      const auto exact = rows.to(at::kDouble).sum(0);
      const auto sum_bound = rows.to(at::kDouble).abs().sum(0) * 1e-5 + exact.abs() * unit_of(dtype);
      EXPECT_FALSE(((replayed.to(at::kDouble) - exact).abs() > sum_bound).any().item<bool>()) << what;
      EXPECT_FALSE(((aten_sums.to(at::kDouble) - aten_rows.to(at::kDouble).sum(0)).abs() > sum_bound).any().item<bool>())
          << what;
    }
  }
}

struct Leaves {
  at::Tensor x, w, b;
};
Leaves leaves(at::ScalarType dtype, bool x_grad, bool w_grad) {
  at::manual_seed(23);
  return {(at::randn({2, 5, 24})).to(dtype).requires_grad_(x_grad), (at::randn({40, 24}) * 0.2).to(dtype).requires_grad_(w_grad),
          (at::randn({40}) * 0.1).to(dtype).requires_grad_()};
}

// The node's output and gradients against ATen's composite on the same leaves.
void expect_node_equals_aten(at::ScalarType dtype, bool x_grad, bool w_grad, int gelu /*0 none, 1 tanh, 2 erf*/) {
  const std::string what = std::string(c10::toString(dtype)) + " x_grad " + std::to_string(x_grad) + " w_grad " +
                           std::to_string(w_grad) + " gelu " + std::to_string(gelu);
  const Leaves a = leaves(dtype, x_grad, w_grad), r = leaves(dtype, x_grad, w_grad);
  const auto fused = gelu == 0 ? linear_fused(a.x, a.w, a.b) : linear_gelu_fused(a.x, a.w, a.b, gelu == 1);
  auto reference = at::linear(r.x, r.w, r.b);
  if (gelu != 0) reference = at::gelu(reference, gelu == 1 ? "tanh" : "none");
  ASSERT_EQ(fused.sizes(), reference.sizes()) << what;
  ASSERT_EQ(fused.scalar_type(), dtype) << what;
  const double tol = dtype == at::kFloat ? 1e-5 : 2e-2;
  EXPECT_TRUE(at::allclose(fused, reference, tol, tol)) << what;
  const auto upstream = at::randn(fused.sizes()).to(dtype);
  fused.backward(upstream);
  reference.backward(upstream);
  EXPECT_EQ(a.x.grad().defined(), x_grad) << what;
  EXPECT_EQ(a.w.grad().defined(), w_grad) << what;
  ASSERT_TRUE(a.b.grad().defined()) << what;
  if (x_grad) {
    EXPECT_TRUE(at::allclose(a.x.grad(), r.x.grad(), tol, tol)) << what;
  }
  if (w_grad) {
    EXPECT_TRUE(at::allclose(a.w.grad(), r.w.grad(), tol, tol)) << what;
  }
  EXPECT_EQ(a.b.grad().scalar_type(), dtype) << what;
  EXPECT_TRUE(at::allclose(a.b.grad(), r.b.grad(), tol, 4 * tol)) << what;
}

TEST(LinearKernels, TheNodesEqualAtensLinearAndGeluForwardAndBackward) {
  for (const auto dtype : {at::kFloat, at::kBFloat16})
    for (const int gelu : {0, 1, 2}) {
      expect_node_equals_aten(dtype, true, true, gelu);
      expect_node_equals_aten(dtype, false, true, gelu);  // the first projection's input needs no gradient
      expect_node_equals_aten(dtype, true, false, gelu);  // a frozen weight, a trained bias
    }
}

// What ATen's linear allows on its output and its graph: an in-place op on the output works; a second
// derivative, which the kernels' results cannot carry, is refused with a message, not computed wrong.
TEST(LinearKernels, TheNodesOutputTakesInPlaceOpsAndASecondDerivativeIsRefused) {
  for (const bool gelu : {false, true}) {
    const Leaves l = leaves(at::kFloat, true, true);
    auto y = gelu ? linear_gelu_fused(l.x, l.w, l.b, true) : linear_fused(l.x, l.w, l.b);
    y.add_(1.0);  // ATen's linear's output takes it; a view made inside a node would not
    EXPECT_NO_THROW(y.sum().backward()) << gelu;
    ASSERT_TRUE(l.b.grad().defined()) << gelu;
    const Leaves m = leaves(at::kFloat, true, true);
    const auto z = gelu ? linear_gelu_fused(m.x, m.w, m.b, true) : linear_fused(m.x, m.w, m.b);
    try {
      torch::autograd::grad({z.sum()}, {m.x}, {}, /*retain_graph=*/true, /*create_graph=*/true);
      ADD_FAILURE() << "expected the second derivative refused, gelu " << gelu;
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("has no second derivative"), std::string::npos) << e.what();
    }
  }
}

TEST(LinearKernels, TheCpuTakesAtensLinearAndTheNodesSayWhyNot) {
  const Leaves l = leaves(at::kFloat, true, true);
  start_recording_paths();
  EXPECT_TRUE(at::equal(linear(l.x, l.w, l.b), at::linear(l.x, l.w, l.b)));
  EXPECT_TRUE(at::equal(linear_gelu(l.x, l.w, l.b, true), at::gelu(at::linear(l.x, l.w, l.b), "tanh")));
  EXPECT_EQ(stop_recording_paths(), 0u);  // ATen's linear is not recorded
  EXPECT_EQ(describe_paths(static_cast<uint32_t>(ForwardPath::linear_bias_gradient_kernel) |
                           static_cast<uint32_t>(ForwardPath::gelu_bias_gradient_kernel)),
            "bias gradients kernel (GELU's too)");
  auto refused = [&](const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const std::string& why) {
    try {
      linear_fused(x, w, b);
      ADD_FAILURE() << "expected an InputError: " << why;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("the fused linear's bias-gradient node does not apply: " + why),
                std::string::npos)
          << e.what();
    }
  };
  refused(l.x, l.w, at::Tensor(), "it fuses a bias's gradient; this projection has no bias");
  refused(l.x, l.w, l.b.detach(), "it fuses a bias's gradient; this bias is not trained");
  refused(l.x.to(at::kBFloat16), l.w, l.b, "it takes x, weight and bias of one dtype; got BFloat16, Float and Float");
  refused(l.x, l.w.t(), l.b, "it takes x [..., in], weight [out, in] and bias [out]");
  refused(at::randn({2, 0}), at::randn({3, 0}), at::zeros({3}).requires_grad_(),
          "it takes a weight of at least one element");
  {
    struct CpuAutocast {  // on for this scope only, whatever throws
      CpuAutocast() {
        at::autocast::set_autocast_enabled(at::kCPU, true);
        at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
      }
      ~CpuAutocast() { at::autocast::set_autocast_enabled(at::kCPU, false); }
    } autocast;
    refused(l.x, l.w, l.b, "autocast would cast x, weight and bias to BFloat16");
  }
}

}  // namespace
}  // namespace segtrain::kernels
