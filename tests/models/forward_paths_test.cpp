// What a forward records of the paths it took (kernels/forward_paths.h), against the paths each
// model's configuration must take on the CPU: RoPE, RMSNorm and SwiGLU composites, LayerNorm in fp32, causal attention for
// RoPE and learned positions, ALiBi's bias tensor (fp32 q/k/v in an fp32 run, 16-bit under the
// CPU's bf16 autocast), and the one SDPA kernel at::_fused_sdp_choice names; nothing while not
// recording.
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <bit>

#include "kernels/forward_paths.h"
#include "models/modules/transformer.h"
#include "tiny_models.h"

namespace segtrain::models {
namespace {

using kernels::ForwardPath;

uint32_t bits(std::initializer_list<ForwardPath> paths) {
  uint32_t out = 0;
  for (auto p : paths) out |= static_cast<uint32_t>(p);
  return out;
}

constexpr uint32_t kSdpa = static_cast<uint32_t>(ForwardPath::sdpa_math) | static_cast<uint32_t>(ForwardPath::sdpa_flash) |
                           static_cast<uint32_t>(ForwardPath::sdpa_memory_efficient) |
                           static_cast<uint32_t>(ForwardPath::sdpa_cudnn) | static_cast<uint32_t>(ForwardPath::sdpa_other);

// The paths one training forward and backward of `arch` records (positions spread over 3x the tokens).
uint32_t recorded(Arch arch, bool bf16) {
  at::manual_seed(3);
  TransformerLM model(test::tiny_model_config(arch, 50, 64));
  model->train();
  const auto tokens = at::randint(50, {2, 16});
  const auto positions = (at::arange(16, at::kLong) * 3).repeat({2, 1});
  kernels::start_recording_paths();
  at::Tensor logits;
  {
    at::autocast::set_autocast_enabled(at::kCPU, bf16);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    logits = model->forward(tokens, positions, PositionBounds::of(positions));
    at::autocast::set_autocast_enabled(at::kCPU, false);
  }
  logits.to(at::kFloat).sum().backward();
  return kernels::stop_recording_paths();
}

TEST(ForwardPaths, NothingIsRecordedOutsideARecordingAndStartClearsTheLastOne) {
  kernels::start_recording_paths();
  kernels::record_path(ForwardPath::rope_fused);
  EXPECT_EQ(kernels::stop_recording_paths(), bits({ForwardPath::rope_fused}));
  kernels::record_path(ForwardPath::rms_norm_fused);  // not recording
  kernels::start_recording_paths();
  EXPECT_EQ(kernels::stop_recording_paths(), 0u);
  EXPECT_EQ(kernels::describe_paths(0), "");
  EXPECT_EQ(kernels::describe_paths(bits({ForwardPath::rope_fused, ForwardPath::rope_composite,
                                          ForwardPath::rms_norm_fused, ForwardPath::attention_alibi_folded,
                                          ForwardPath::attention_causal, ForwardPath::sdpa_flash})),
            "RoPE fused kernel and composite; RMSNorm fused (ATen); attention causal (no mask), ALiBi folded into "
            "q·k; SDPA kernel flash");
  EXPECT_EQ(kernels::describe_paths(bits({ForwardPath::attention_causal, ForwardPath::sdpa_cudnn,
                                          ForwardPath::cross_entropy_fused, ForwardPath::layer_norm_16bit})),
            "LayerNorm 16-bit; attention causal (no mask); SDPA kernel cuDNN; cross-entropy fused kernel");
}

TEST(ForwardPaths, EachArchitectureRecordsThePathsItsForwardTakesOnTheCpu) {
  const uint32_t llama = recorded(Arch::llama, false);
  EXPECT_EQ(llama & ~kSdpa, bits({ForwardPath::rope_composite, ForwardPath::rms_norm_composite,
                                  ForwardPath::attention_causal, ForwardPath::swiglu_composite}))
      << kernels::describe_paths(llama);
  EXPECT_EQ(std::popcount(llama & kSdpa), 1) << kernels::describe_paths(llama);
  const uint32_t gpt2 = recorded(Arch::gpt2, false);
  EXPECT_EQ(gpt2 & ~kSdpa, bits({ForwardPath::layer_norm_fp32, ForwardPath::attention_causal}))
      << kernels::describe_paths(gpt2);
  const uint32_t bloom = recorded(Arch::bloom, false);
  EXPECT_EQ(bloom & ~kSdpa, bits({ForwardPath::layer_norm_fp32, ForwardPath::attention_bias_fp32}))
      << kernels::describe_paths(bloom);
  // Under the CPU's bf16 autocast the fp32 parameters keep an fp32 stream, so LayerNorm stays fp32.
  const uint32_t bloom_bf16 = recorded(Arch::bloom, true);
  EXPECT_EQ(bloom_bf16 & ~kSdpa, bits({ForwardPath::layer_norm_fp32, ForwardPath::attention_bias_16bit}))
      << kernels::describe_paths(bloom_bf16);
  EXPECT_EQ(std::popcount(bloom_bf16 & kSdpa), 1) << kernels::describe_paths(bloom_bf16);
}

}  // namespace
}  // namespace segtrain::models
