#include "kernels/forward_paths.h"

#include <ATen/autocast_mode.h>

#include <atomic>
#include <utility>
#include <vector>

namespace segtrain::kernels {
namespace {

std::atomic<bool> recording{false};
std::atomic<uint32_t> taken{0};

bool has(uint32_t paths, ForwardPath p) { return (paths & static_cast<uint32_t>(p)) != 0; }

// A tensor with x's sizes, strides and device in the dtype SDPA would see (autocast's where it
// casts x), and x's requires_grad: what the kernel choice reads, without a copy of the values.
at::Tensor as_sdpa_sees(const at::Tensor& x) {
  const auto device = x.device().type();
  const bool cast = at::autocast::is_autocast_enabled(device) && at::isFloatingType(x.scalar_type()) &&
                    x.scalar_type() != at::kDouble;
  const auto dtype = cast ? at::autocast::get_autocast_dtype(device) : x.scalar_type();
  return at::empty_strided(x.sizes(), x.strides(), x.options().dtype(dtype)).requires_grad_(x.requires_grad());
}

}  // namespace

void start_recording_paths() {
  taken.store(0);
  recording.store(true);
}

uint32_t stop_recording_paths() {
  recording.store(false);
  return taken.load();
}

bool recording_paths() { return recording.load(std::memory_order_relaxed); }

void record_path(ForwardPath path) {
  if (recording_paths()) taken.fetch_or(static_cast<uint32_t>(path), std::memory_order_relaxed);
}

void record_sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& mask,
                 bool is_causal, std::optional<double> scale, bool enable_gqa) {
  if (!recording_paths()) return;
  const at::NoGradGuard no_grad;  // the probes are not part of the graph
  std::optional<at::Tensor> m;
  if (mask) m = at::empty_strided(mask->sizes(), mask->strides(), mask->options());
  const int64_t backend =
      at::_fused_sdp_choice(as_sdpa_sees(q), as_sdpa_sees(k), as_sdpa_sees(v), m, 0.0, is_causal, scale, enable_gqa);
  // at::SDPBackend (ATen/native/transformers/sdp_utils_cpp.h): 0 math, 1 flash, 2 memory-efficient, 3 cuDNN.
  switch (backend) {
    case 0: return record_path(ForwardPath::sdpa_math);
    case 1: return record_path(ForwardPath::sdpa_flash);
    case 2: return record_path(ForwardPath::sdpa_memory_efficient);
    case 3: return record_path(ForwardPath::sdpa_cudnn);
    default: return record_path(ForwardPath::sdpa_other);
  }
}

std::string describe_paths(uint32_t paths) {
  std::vector<std::string> parts;
  auto either = [&](const char* what, ForwardPath fused, const char* fused_words, ForwardPath composite,
                    const char* composite_words = "composite") {
    std::string words;
    if (has(paths, fused)) words += fused_words;
    if (has(paths, composite)) words += std::string(words.empty() ? "" : " and ") + composite_words;
    if (!words.empty()) parts.push_back(std::string(what) + " " + words);
  };
  either("RoPE", ForwardPath::rope_fused, "fused kernel", ForwardPath::rope_composite);
  either("RMSNorm", ForwardPath::rms_norm_fused, "fused (ATen)", ForwardPath::rms_norm_composite);
  if (has(paths, ForwardPath::residual_rms_norm_kernel)) parts.push_back("residual add + RMSNorm fused kernel");
  either("LayerNorm", ForwardPath::layer_norm_16bit, "16-bit", ForwardPath::layer_norm_fp32, "fp32");
  if (has(paths, ForwardPath::residual_layer_norm_kernel)) parts.push_back("residual add + LayerNorm fused kernel");
  std::vector<std::string> attention;
  for (const auto& [p, words] : std::vector<std::pair<ForwardPath, const char*>>{
           {ForwardPath::attention_causal, "causal (no mask)"},
           {ForwardPath::attention_alibi_folded, "ALiBi folded into q·k"},
           {ForwardPath::attention_bias_fp32, "with a bias tensor, fp32 q/k/v"},
           {ForwardPath::attention_bias_16bit, "with a bias tensor, 16-bit q/k/v"},
           {ForwardPath::attention_kv_repeated, "k/v repeated to the query heads"}})
    if (has(paths, p)) attention.push_back(words);
  std::vector<std::string> kernels;
  for (const auto& [p, words] : std::vector<std::pair<ForwardPath, const char*>>{{ForwardPath::sdpa_flash, "flash"},
                                                                                 {ForwardPath::sdpa_cudnn, "cuDNN"},
                                                                                 {ForwardPath::sdpa_memory_efficient,
                                                                                  "memory-efficient"},
                                                                                 {ForwardPath::sdpa_math, "math"},
                                                                                 {ForwardPath::sdpa_other, "another"}})
    if (has(paths, p)) kernels.push_back(words);
  auto joined = [](const std::vector<std::string>& list) {
    std::string out;
    for (const auto& s : list) out += (out.empty() ? "" : ", ") + s;
    return out;
  };
  if (!attention.empty()) parts.push_back("attention " + joined(attention));
  if (!kernels.empty()) parts.push_back("SDPA kernel " + joined(kernels));
  either("SwiGLU", ForwardPath::swiglu_fused, "fused kernel", ForwardPath::swiglu_composite);
  either("cross-entropy", ForwardPath::cross_entropy_fused, "fused kernel", ForwardPath::cross_entropy_composite);
  const bool linears = has(paths, ForwardPath::linear_bias_gradient_kernel);
  const bool gelu = has(paths, ForwardPath::gelu_bias_gradient_kernel);
  if (linears || gelu)
    parts.push_back(std::string("bias gradients kernel") + (linears && gelu ? " (GELU's too)" : gelu ? " (GELU's)" : ""));
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

}  // namespace segtrain::kernels
