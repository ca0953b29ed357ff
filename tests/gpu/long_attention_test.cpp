// The GPU suite (gpu/gpu_suite.h): attention at long lengths.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <string>
#if SEGTRAIN_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "gpu/gpu_suite.h"
#include "models/modules/attention.h"
#include "trainer/runtime/device.h"

namespace segtrain {
namespace {

using test::device_under_test;
using test::record;

// ---------------------------------------------------------------------------
// Attention at long lengths.

// SmolLM2's attention shape (9 query heads, 3 key/value heads, head dim 64) at 32,768 tokens, a
// forward without gradients, in fp32 and under bf16 autocast: the memory it adds over q, k and v
// stays under 1 GiB. SDPA's math kernel, which fp32 grouped-query attention fell back to, holds
// 9 x 32,768^2 fp32 scores and more (85 GiB measured on an H200, bench/gpu_sdpa_backends_bench.py).
TEST(LongAttention, GroupedQueryAttentionAt32kTokensTakesAFusedKernelInFp32AndBf16) {
  REQUIRE_DEVICE(1);
  if (device_under_test() != "cuda") SKIP_NOT_APPLICABLE("measures CUDA's caching allocator");
#if SEGTRAIN_WITH_CUDA
  using c10::CachingAllocator::StatType;
  const auto allocated_peak_mb = [] {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
    return static_cast<double>(stats.allocated_bytes[static_cast<size_t>(StatType::AGGREGATE)].peak) / (1 << 20);
  };
  const int64_t t = 32768;
  const auto opts = at::TensorOptions().device(at::kCUDA);
  auto q = at::randn({1, 9, t, 64}, opts), k = at::randn({1, 3, t, 64}, opts), v = at::randn({1, 3, t, 64}, opts);
  at::NoGradGuard no_grad;
  for (bool bf16 : {false, true}) {
    torch::cuda::synchronize();
    c10::cuda::CUDACachingAllocator::resetPeakStats(0);
    const double before = allocated_peak_mb();  // just reset: what is allocated now
    {
      trainer::Autocast autocast(bf16, at::kCUDA);
      auto y = models::causal_attention(q, k, v);
      torch::cuda::synchronize();
    }
    const double added = allocated_peak_mb() - before;
    record(std::string("attention at 32,768 tokens, 9 query / 3 key-value heads, ") + (bf16 ? "bf16 autocast" : "fp32") +
           ": peak " + std::to_string(added) + " MiB over q, k and v");
    EXPECT_LT(added, 1024.0) << (bf16 ? "bf16" : "fp32");
  }
#endif
}

}  // namespace
}  // namespace segtrain
