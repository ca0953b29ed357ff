// The LM head's cross-entropy (kernels/cross_entropy.h): the fused kernel's per-row arithmetic
// (kernels/cross_entropy_element.h), replayed here on the host over the kernel's threads and its
// block's reduction order, against ATen's composite and against cross-entropy in double; the
// rows a run can meet (ignored targets, masked -inf logits, a NaN, logits far from 0). On a GPU
// the gpu suite runs the kernel itself (tests/gpu, FusedKernels).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/error.h"
#include "kernels/cross_entropy.h"
#include "kernels/cross_entropy_element.h"
#include "kernels/forward_paths.h"
#include "kernels/fused_kernels.h"

namespace segtrain::kernels {
namespace {

constexpr int64_t kIgnore = -100;
constexpr int kThreads = 512, kWarp = 32;  // cross_entropy_cuda.cu's block

// The kernel on the host: each of the block's 512 threads folds the logits j = thread + 512 k,
// each warp merges its lanes as a shuffle tree does (lane i takes lane i + 2^s), then the warps'
// results one after another (cub::BlockReduce's warp reductions); the gradient written in the
// logits' dtype over an fp32 copy here.
CrossEntropyRows host_kernel(const at::Tensor& logits, const at::Tensor& targets, bool gradient) {
  const at::Tensor x = logits.to(at::kFloat).contiguous();
  const int64_t rows = x.size(0), vocab = x.size(1);
  CrossEntropyRows out;
  out.nll = at::empty({rows}, at::kFloat);
  at::Tensor grad = at::empty({rows, vocab}, at::kFloat);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.const_data_ptr<float>() + r * vocab;
    std::vector<SoftmaxPartial> partial(kThreads, softmax_partial_empty());
    for (int t = 0; t < kThreads; ++t)
      for (int64_t j = t; j < vocab; j += kThreads) partial[t] = softmax_partial_add(partial[t], row[j]);
    SoftmaxPartial whole = softmax_partial_empty();
    for (int w = 0; w < kThreads / kWarp; ++w) {
      std::vector<SoftmaxPartial> lanes(partial.begin() + w * kWarp, partial.begin() + (w + 1) * kWarp);
      for (int step = 1; step < kWarp; step *= 2)
        for (int lane = 0; lane + step < kWarp; lane += 2 * step)
          lanes[lane] = softmax_partial_merge(lanes[lane], lanes[lane + step]);
      whole = w == 0 ? lanes[0] : softmax_partial_merge(whole, lanes[0]);
    }
    const SoftmaxRow softmax = softmax_row(whole);
    const int64_t target = targets[r].item<int64_t>();
    const bool ignored = target == kIgnore, in_range = target >= 0 && target < vocab;
    out.nll[r] = ignored ? 0.0f : (in_range ? cross_entropy_nll(row[target], softmax) : std::numeric_limits<float>::quiet_NaN());
    float* g = grad.mutable_data_ptr<float>() + r * vocab;
    for (int64_t j = 0; j < vocab; ++j) g[j] = ignored ? 0.0f : cross_entropy_gradient(row[j], softmax, j == target);
  }
  if (gradient) out.grad = grad.to(logits.scalar_type());  // rounded once from fp32, as the kernel writes
  return out;
}

// Random targets with two rows ignored.
at::Tensor targets_for(int64_t rows, int64_t vocab) {
  auto t = at::randint(0, vocab, {rows}, at::kLong);
  t[1] = kIgnore;
  t[rows - 1] = kIgnore;
  return t;
}

at::Tensor kept_rows(const at::Tensor& targets) { return targets.ne(kIgnore).unsqueeze(1); }

// Largest |a - b| where b is finite, relative to the largest |b|.
double relative_difference(const at::Tensor& a, const at::Tensor& b) {
  const auto a64 = a.to(at::kDouble), b64 = b.to(at::kDouble);
  return (a64 - b64).abs().max().item<double>() / std::max(b64.abs().max().item<double>(), 1e-30);
}

TEST(CrossEntropyKernel, ArithmeticEqualsTheCompositeAndCrossEntropyInDouble) {
  for (const int64_t vocab : {int64_t{1000}, int64_t{50257}})
    for (const auto dtype : {at::kFloat, at::kBFloat16})
      for (const double offset : {0.0, 3000.0}) {  // logits far from 0: the log-sum-exp must not overflow
        at::manual_seed(5);
        const int64_t rows = 6;
        const auto logits = (at::randn({rows, vocab}) * 4.0 + offset).to(dtype);
        const auto targets = targets_for(rows, vocab);
        const auto what = std::string(c10::toString(dtype)) + " vocab " + std::to_string(vocab) + " offset " +
                          std::to_string(offset);
        const auto kernel = host_kernel(logits, targets, true);
        const auto composite = cross_entropy_rows_composite(logits, targets, kIgnore, true);
        ASSERT_EQ(kernel.grad.scalar_type(), dtype) << what;
        ASSERT_EQ(composite.grad.scalar_type(), dtype) << what;
        // The loss: both fp32 over the same logits, within fp32's rounding of the largest loss
        // (x - max exact: no rounding of `offset` enters).
        const auto reference =
            at::cross_entropy_loss(logits.to(at::kDouble), targets, {}, at::Reduction::None, kIgnore);
        const double bound = 1e-6 * std::max(1.0, reference.abs().max().item<double>());
        EXPECT_LE((kernel.nll.to(at::kDouble) - reference).abs().max().item<double>(), bound) << what;
        // The composite subtracts the rounded log-sum-exp from x, which at `offset` costs a few
        // units in the last place of it.
        EXPECT_LE((kernel.nll - composite.nll).abs().max().item<double>(), bound + std::ldexp(offset, -22)) << what;
        EXPECT_EQ(kernel.nll[1].item<float>(), 0.0f) << what;
        // The gradient where the targets count (the kernel writes zeros elsewhere; the composite's
        // caller drops those rows): the same fp32 value rounded once to the logits' dtype.
        const auto keep = kept_rows(targets);
        const auto got = kernel.grad.to(at::kFloat).masked_fill(keep.logical_not(), 0);
        const auto want = composite.grad.to(at::kFloat).masked_fill(keep.logical_not(), 0);
        EXPECT_TRUE(at::allclose(got, want, dtype == at::kFloat ? 1e-4 : 1.0 / 128, 1e-7))
            << what << ": relative difference " << relative_difference(got, want);
        EXPECT_EQ(kernel.grad.select(0, 1).to(at::kFloat).abs().max().item<float>(), 0.0f) << what;
        // Each gradient row sums to 0 (softmax sums to 1, less the target's 1).
        EXPECT_LT(got.sum(1).abs().max().item<double>(), dtype == at::kFloat ? 1e-5 : 2e-2) << what;
      }
}

TEST(CrossEntropyKernel, MaskedLogitsANanAndATargetOutOfRange) {
  const int64_t vocab = 700;
  at::manual_seed(6);
  auto logits = at::randn({4, vocab});
  logits[0].narrow(0, 100, 500).fill_(-std::numeric_limits<float>::infinity());  // a masked part of the vocabulary
  logits[1][7] = std::numeric_limits<float>::quiet_NaN();
  const auto targets = at::tensor({int64_t{3}, int64_t{2}, int64_t{5}, int64_t{vocab}}, at::kLong);
  const auto kernel = host_kernel(logits, targets, true);
  const auto composite = cross_entropy_rows_composite(logits.narrow(0, 0, 3), targets.narrow(0, 0, 3), kIgnore, true);
  // Masked logits add nothing and take no gradient: the row's loss is the composite's, finite.
  EXPECT_TRUE(std::isfinite(kernel.nll[0].item<float>()));
  EXPECT_NEAR(kernel.nll[0].item<float>(), composite.nll[0].item<float>(), 1e-5);
  EXPECT_EQ(kernel.grad[0].narrow(0, 100, 500).abs().max().item<float>(), 0.0f);
  EXPECT_TRUE(at::allclose(kernel.grad[0], composite.grad[0], 1e-4, 1e-7));
  // A NaN logit makes the row's loss NaN, as the composite's (the trainer then skips the step).
  EXPECT_TRUE(std::isnan(composite.nll[1].item<float>()));
  EXPECT_TRUE(std::isnan(kernel.nll[1].item<float>()));
  EXPECT_NEAR(kernel.nll[2].item<float>(), composite.nll[2].item<float>(), 1e-5);
  // A target past the vocabulary: NaN from the kernel (it cannot throw without a wait); the composite throws.
  EXPECT_TRUE(std::isnan(kernel.nll[3].item<float>()));
  EXPECT_ANY_THROW(cross_entropy_rows_composite(logits, targets, kIgnore, false));

  // A row shorter than the block: the thread holding the NaN holds nothing else ({-inf, NaN}), and
  // the merge must keep its NaN; a row of -inf but the target stays finite.
  for (const int64_t short_vocab : {int64_t{300}, int64_t{1}}) {
    auto row = at::randn({2, short_vocab});
    row[0][short_vocab - 1] = std::numeric_limits<float>::quiet_NaN();
    row[1].fill_(-std::numeric_limits<float>::infinity());
    row[1][0] = 2.5f;
    const auto t = at::zeros({2}, at::kLong);
    const auto replayed = host_kernel(row, t, true);
    EXPECT_TRUE(std::isnan(replayed.nll[0].item<float>())) << "vocab " << short_vocab;
    EXPECT_TRUE(std::isnan(cross_entropy_rows_composite(row, t, kIgnore, false).nll[0].item<float>()));
    EXPECT_EQ(replayed.nll[1].item<float>(), 0.0f) << "vocab " << short_vocab;  // softmax 1 at the only finite logit
  }
}

TEST(CrossEntropyKernel, PartialsMergeInAnyOrder) {
  // The block's tree is one order of many: merging the same partials in reverse gives the same
  // log-sum-exp to fp32's rounding.
  at::manual_seed(7);
  const auto x = at::randn({4096}) * 6.0;
  std::vector<SoftmaxPartial> parts(64, softmax_partial_empty());
  for (int64_t j = 0; j < x.size(0); ++j) parts[j % 64] = softmax_partial_add(parts[j % 64], x[j].item<float>());
  SoftmaxPartial forward = softmax_partial_empty(), backward = softmax_partial_empty();
  for (size_t i = 0; i < parts.size(); ++i) {
    forward = softmax_partial_merge(forward, parts[i]);
    backward = softmax_partial_merge(parts[parts.size() - 1 - i], backward);
  }
  const double want = at::logsumexp(x.to(at::kDouble), 0).item<double>();
  auto lse = [](SoftmaxPartial p) { return softmax_row(p).max + softmax_row(p).log_sum; };
  EXPECT_NEAR(lse(forward), want, 1e-5);
  EXPECT_NEAR(lse(backward), want, 1e-5);
}

TEST(CrossEntropyKernel, TheCpuTakesTheCompositeAndAFusedCallSaysWhyNot) {
  at::manual_seed(8);
  const auto logits = at::randn({5, 40});
  const auto targets = targets_for(5, 40);
  // The logits in a buffer whose rows are padded (the LM head's): the gradient lands in the
  // buffer, the padding columns untouched.
  const auto buffer = at::full({5, 64}, 7.0f);
  auto view = buffer.narrow(1, 0, 40);
  view.copy_(logits);
  start_recording_paths();
  const auto rows = cross_entropy_rows(view, targets, kIgnore, true);
  EXPECT_EQ(stop_recording_paths(), static_cast<uint32_t>(ForwardPath::cross_entropy_composite));
  const auto composite = cross_entropy_rows_composite(logits, targets, kIgnore, true);
  EXPECT_TRUE(at::equal(rows.nll, composite.nll));
  EXPECT_TRUE(at::equal(rows.grad, composite.grad));
  EXPECT_EQ(rows.grad.data_ptr(), buffer.data_ptr());
  EXPECT_EQ(rows.grad.stride(0), 64);
  EXPECT_TRUE(at::equal(buffer.narrow(1, 40, 24), at::full({5, 24}, 7.0f)));
  // bf16 logits take their gradient too (the composite's fp32 one converted in, as its cast did); contiguous
  // fp32 logits keep theirs and hand back the composite's own buffer (no pass to copy it).
  const auto bf16 = logits.to(at::kBFloat16);
  const auto in_bf16 = cross_entropy_rows(bf16, targets, kIgnore, true);
  EXPECT_EQ(in_bf16.grad.data_ptr(), bf16.data_ptr());
  EXPECT_TRUE(at::equal(in_bf16.grad, cross_entropy_rows_composite(logits.to(at::kBFloat16), targets, kIgnore, true).grad));
  const auto fp32 = logits.clone();
  EXPECT_NE(cross_entropy_rows(fp32, targets, kIgnore, true).grad.data_ptr(), fp32.data_ptr());
  EXPECT_TRUE(at::equal(fp32, logits));
  try {
    cross_entropy_rows_fused(logits, targets, kIgnore, true);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    const std::string expected = fused_kernels_built() ? "it takes CUDA tensors; got logits on cpu" : "has no CUDA";
    EXPECT_NE(std::string(e.what()).find("the fused cross-entropy kernel does not apply: "), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace segtrain::kernels
