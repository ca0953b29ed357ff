#pragma once
// Which implementation each of a forward's choices took: the fused RoPE kernel or the composite,
// ATen's fused RMSNorm or the composite, LayerNorm in 16 bits or fp32, attention with the implicit causal mask, with ALiBi
// folded into q·k or with its bias tensor, the kernel SDPA picked for it, SwiGLU's kernels or
// composite, the loss's
// cross-entropy kernel or composite, and the linears' bias-gradient kernels and the fused residual
// add and norm where taken (ATen's linear, and its add, are not recorded). The choices are made
// per call (by the switch, the device, the dtypes, a batch's positions), so a plan line can only
// say what is switched on; the trainer records its first step's choices and logs them, so that a
// GPU run says whether it took the paths its GPU tests check.
#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>

namespace segtrain::kernels {

enum class ForwardPath : uint32_t {
  rope_fused = 1u << 0,
  rope_composite = 1u << 1,
  rms_norm_fused = 1u << 2,
  rms_norm_composite = 1u << 3,
  attention_causal = 1u << 4,        // no mask: SDPA's is_causal
  attention_alibi_folded = 1u << 5,  // ALiBi folded into q·k (models/modules/alibi_folded.h), is_causal
  attention_bias_fp32 = 1u << 6,     // a bias tensor, q, k and v in fp32 (CUDA under autocast, or an fp32 run)
  attention_bias_16bit = 1u << 7,    // a bias tensor, 16-bit q, k and v (the CPU under autocast)
  attention_kv_repeated = 1u << 8,   // k and v repeated to q's heads for a kernel that takes no fewer
  sdpa_math = 1u << 9,               // SDPA's kernel (at::_fused_sdp_choice)
  sdpa_flash = 1u << 10,
  sdpa_memory_efficient = 1u << 11,
  sdpa_cudnn = 1u << 12,
  sdpa_other = 1u << 13,
  cross_entropy_fused = 1u << 14,  // the LM head's loss (kernels/cross_entropy.h)
  cross_entropy_composite = 1u << 15,
  layer_norm_16bit = 1u << 16,  // its result 16-bit (kernels/layer_norm.h: outside autocast on CUDA)
  layer_norm_fp32 = 1u << 17,   // its result fp32 (autocast's policy for a 16-bit x, or an fp32 x)
  swiglu_fused = 1u << 18,      // the Llama MLP's silu(gate) * up (kernels/swiglu.h)
  swiglu_composite = 1u << 19,
  linear_bias_gradient_kernel = 1u << 20,  // a projection's bias gradient by the column-sum kernel (kernels/linear.h)
  gelu_bias_gradient_kernel = 1u << 21,    // the GELU MLP's, with GELU's gradient in the same pass
  residual_layer_norm_kernel = 1u << 22,   // the residual add and the LayerNorm after it (kernels/residual_norm.h)
  residual_rms_norm_kernel = 1u << 23,     // the residual add and the RMSNorm after it
};

// Starts recording (clearing what an earlier recording noted).
void start_recording_paths();
// Ends the recording: the paths taken since it started, as a mask of ForwardPath bits.
uint32_t stop_recording_paths();
bool recording_paths();

// Notes a path (a relaxed atomic or; nothing while not recording).
void record_path(ForwardPath path);
// Notes the kernel SDPA takes for these arguments, asked of at::_fused_sdp_choice while
// recording only, with q, k and v in the dtype autocast would give them.
void record_sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& mask,
                 bool is_causal, std::optional<double> scale, bool enable_gqa);

// "RoPE composite; RMSNorm fused (ATen); LayerNorm 16-bit; residual add + LayerNorm fused kernel; attention ALiBi folded into q·k; SDPA
// kernel flash; SwiGLU fused kernel; cross-entropy fused kernel; bias gradients kernel (GELU's
// too)" ("" for none).
std::string describe_paths(uint32_t paths);

}  // namespace segtrain::kernels
