#include "models/modules/lm_head_loss.h"

#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <vector>

#include "kernels/cross_entropy.h"

namespace segtrain::models {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Autocast off for one device while alive: the head's casts are explicit here,
// and an autocast matmul would cast (and round) them a second time.
class NoAutocast {
 public:
  explicit NoAutocast(at::DeviceType device) : device_(device), was_(at::autocast::is_autocast_enabled(device)) {
    if (was_) at::autocast::set_autocast_enabled(device_, false);
  }
  ~NoAutocast() {
    if (was_) at::autocast::set_autocast_enabled(device_, true);
  }
  NoAutocast(const NoAutocast&) = delete;
  NoAutocast& operator=(const NoAutocast&) = delete;

 private:
  at::DeviceType device_;
  bool was_;
};

// The dtype of the head's matmuls: what `linear` would compute in right here.
at::ScalarType compute_dtype(const at::Tensor& hidden, const at::Tensor& weight) {
  const auto device = hidden.device().type();
  if (at::autocast::is_autocast_enabled(device)) return at::autocast::get_autocast_dtype(device);
  return at::promote_types(hidden.scalar_type(), weight.scalar_type());
}

struct Slices {
  at::Tensor nll;          // [N] fp32
  at::Tensor grad_hidden;  // [N,D] fp32, d sum(nll) / d hidden, when asked for
  at::Tensor grad_weight;  // [V,D] fp32, d sum(nll) / d W, when asked for
};

// The head and cross-entropy of hidden [N,D] against targets [N], `chunk` rows at
// a time: each slice's logits, their loss and d nll / d logits = softmax - onehot(t)
// (kernels/cross_entropy.h: where the memory traffic of this loss lies), folded into d hidden
// and d W. Rows of ignored targets are dropped where they meet W and hidden (a [chunk,D]
// mask), not zeroed in the [chunk,V] buffer.
Slices run_slices(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets, int64_t chunk,
                  int64_t ignore_index, at::ScalarType compute, bool want_hidden, bool want_weight) {
  TORCH_CHECK(chunk >= 1, "lm_head_loss: chunk_tokens must be >= 1, got ", chunk);
  NoAutocast no_autocast(hidden.device().type());
  const int64_t n = hidden.size(0);
  const auto fp32 = hidden.options().dtype(at::kFloat);
  const int64_t vocab = weight.size(0);
  const at::Tensor w = head_weight_for_gemms(weight, compute);  // [padded V, D]
  const int64_t width = w.size(0);
  Slices out;
  out.nll = at::empty({n}, fp32);
  if (want_hidden) out.grad_hidden = at::empty({n, hidden.size(1)}, fp32);
  // d W: the first slice's share written, the others' added (no pass to zero it first); zeros without a slice.
  if (want_weight) {
    const std::vector<int64_t> shape = {vocab, weight.size(1)};
    out.grad_weight = n == 0 ? at::zeros(shape, fp32) : at::empty(shape, fp32);
  }
  // Every slice's logits, then their gradient, in one buffer as wide as the padded vocabulary.
  const at::Tensor logits_buffer = at::empty({std::min(chunk, n), width}, hidden.options().dtype(compute));
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t rows = std::min(chunk, n - start);
    const at::Tensor h = hidden.narrow(0, start, rows).to(compute);
    const at::Tensor t = targets.narrow(0, start, rows);
    // The logits in the compute dtype; the loss takes them as cross_entropy on .to(kFloat) logits does.
    at::Tensor padded = logits_buffer.narrow(0, 0, rows);  // [rows, padded V]
    at::mm_out(padded, h, w.t());  // the padding columns are h . 0 = 0 exactly
    kernels::CrossEntropyRows loss =
        kernels::cross_entropy_rows(padded.narrow(1, 0, vocab), t, ignore_index, want_hidden || want_weight);
    out.nll.narrow(0, start, rows).copy_(loss.nll);
    if (!want_hidden && !want_weight) continue;

    // d logits = softmax - onehot over the V columns, written where the logits were; the padding columns
    // still hold their logits, 0, which is their gradient too (no loss reads them): the GEMMs run at the
    // padded width, where cuBLAS's fast kernels apply, and the padding adds nothing to either gradient.
    const at::Tensor g = width == vocab ? loss.grad : padded;
    const at::Tensor dropped = t.eq(ignore_index).unsqueeze(1);
    if (want_hidden) {
      at::Tensor slice = out.grad_hidden.narrow(0, start, rows);
      if (compute == at::kFloat) at::mm_out(slice, g, w);
      else slice.copy_(at::mm(g, w));
      slice.masked_fill_(dropped, 0);
    }
    if (want_weight) {
      const at::Tensor kept = h.masked_fill(dropped, 0);
      const bool first = start == 0;
      if (compute == at::kFloat) {
        if (first) at::mm_out(out.grad_weight, g.t(), kept);
        else out.grad_weight.addmm_(g.t(), kept);
      } else {
        const at::Tensor share = at::mm(g.t(), kept).narrow(0, 0, vocab);  // this slice's, summed in fp32
        if (first) out.grad_weight.copy_(share);
        else out.grad_weight.add_(share);
      }
    }
  }
  return out;
}

// forward: the summed loss, with d loss / d hidden and d loss / d W already
// computed slice by slice, and each token's loss (no gradient: what a caller reads);
// backward: those gradients, times the incoming (scalar) gradient of the sum.
struct LmHeadLossFunction : torch::autograd::Function<LmHeadLossFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                               const at::Tensor& targets, int64_t chunk, int64_t ignore_index,
                               at::ScalarType compute) {
    const bool want_hidden = hidden.requires_grad(), want_weight = weight.requires_grad();
    Slices s = run_slices(hidden, weight, targets, chunk, ignore_index, compute, want_hidden, want_weight);
    if (want_hidden) ctx->saved_data["grad_hidden"] = s.grad_hidden;
    if (want_weight) ctx->saved_data["grad_weight"] = s.grad_weight;
    ctx->saved_data["hidden_dtype"] = static_cast<int64_t>(hidden.scalar_type());
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    ctx->mark_non_differentiable({s.nll});
    // The token losses take no gradient: without this, autograd would fill a zero [N] one for them.
    ctx->set_materialize_grads(false);
    return {s.nll.sum(), s.nll};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const at::Tensor& g = grad_outputs[0];
    if (!g.defined()) return variable_list(6);  // nothing reached the sum (grads not materialised)
    // The saved gradients go with this backward (they are as large as W): a second
    // backward through the same graph has nothing left to scale.
    auto take = [&](const char* name, const char* dtype) -> at::Tensor {
      auto it = ctx->saved_data.find(name);
      if (it == ctx->saved_data.end()) return {};
      TORCH_CHECK(it->second.isTensor(),
                  "lm_head_loss_sum: backward through the same graph a second time is not supported");
      at::Tensor saved = it->second.toTensor();
      it->second = at::IValue();
      const auto type = static_cast<at::ScalarType>(ctx->saved_data.at(dtype).toInt());
      const at::Tensor scale = g.to(at::kFloat);
      if (type == at::kFloat) return saved.mul_(scale);
      // Scaled in fp32 and rounded to the parameter's dtype in one pass (not a mul_ then a cast: for a
      // bf16 head that is two more passes over a [V, D] fp32 tensor a micro-batch).
      at::Tensor out = at::empty(saved.sizes(), saved.options().dtype(type));
      return at::mul_out(out, saved, scale);
    };
    variable_list out(6);
    out[0] = take("grad_hidden", "hidden_dtype");
    out[1] = take("grad_weight", "weight_dtype");
    return out;
  }
};

void check_shapes(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets) {
  TORCH_CHECK(hidden.dim() >= 1 && weight.dim() == 2 && hidden.size(-1) == weight.size(1),
              "lm_head_loss: hidden [..., D] and weight [V, D] do not match: ", hidden.sizes(), " and ",
              weight.sizes());
  TORCH_CHECK(targets.sizes() == hidden.sizes().slice(0, hidden.dim() - 1),
              "lm_head_loss: targets ", targets.sizes(), " must have hidden's leading shape ", hidden.sizes());
}

}  // namespace

at::Tensor head_weight_for_gemms(const at::Tensor& weight, at::ScalarType compute) {
  const int64_t vocab = weight.size(0), width = head_gemm_width(vocab, compute);
  if (width == vocab) return weight.to(compute);
  at::Tensor w = at::empty({width, weight.size(1)}, weight.options().dtype(compute));
  w.narrow(0, 0, vocab).copy_(weight);
  w.narrow(0, vocab, width - vocab).zero_();
  return w;
}

int64_t head_gemm_width(int64_t vocab, at::ScalarType compute) {
  TORCH_CHECK(vocab >= 0, "head_gemm_width: vocabulary ", vocab);
  if (c10::elementSize(compute) != 2) return vocab;
  return (vocab + kHeadGemmAlignment - 1) / kHeadGemmAlignment * kHeadGemmAlignment;
}

int64_t loss_chunk_tokens_for(std::optional<int64_t> configured, int64_t vocab, int64_t trained_head_width,
                              HeadSliceBuffers buffers) {
  if (configured) return *configured;
  vocab = std::max<int64_t>(vocab, 1);
  // Bytes of a slice's buffers a token, and the budgets in the composite's terms: 3 fp32 logits of
  // 64 MiB and of 256 MiB.
  const bool kernel = buffers == HeadSliceBuffers::kernel_16bit;
  const int64_t row_bytes = kernel ? 2 * head_gemm_width(vocab, at::kBFloat16) : 3 * 4 * vocab;
  const int64_t width_multiple = kernel ? 4 : 1;
  const int64_t trained = std::min(trained_head_width * width_multiple, 3 * kMaxTrainedLossChunkBytes / row_bytes);
  const int64_t tokens = std::max<int64_t>({1, 3 * kAutoLossChunkBytes / row_bytes, trained});
  return tokens < kLossChunkTileTokens ? tokens : tokens - tokens % kLossChunkTileTokens;
}

int64_t loss_chunk_tokens_for(std::optional<int64_t> configured, const at::Tensor& hidden, const at::Tensor& weight) {
  const bool trained = torch::autograd::GradMode::is_enabled() && weight.requires_grad();
  const at::ScalarType compute = compute_dtype(hidden, weight);
  const bool kernel =
      c10::elementSize(compute) == 2 && kernels::cross_entropy_kernel_applies(hidden.device(), compute);
  return loss_chunk_tokens_for(configured, weight.size(0), trained ? weight.size(1) : 0,
                               kernel ? HeadSliceBuffers::kernel_16bit : HeadSliceBuffers::composite_fp32);
}

LmHeadLoss lm_head_loss(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                        int64_t chunk_tokens, int64_t ignore_index) {
  check_shapes(hidden, weight, targets);
  const at::ScalarType compute = compute_dtype(hidden, weight);
  const at::Tensor h = hidden.reshape({-1, hidden.size(-1)});
  const at::Tensor t = targets.reshape(-1);
  if (!torch::autograd::GradMode::is_enabled() || (!hidden.requires_grad() && !weight.requires_grad())) {
    const at::Tensor nll = run_slices(h, weight, t, chunk_tokens, ignore_index, compute, false, false).nll;
    return {nll.sum(), nll.view(targets.sizes())};
  }
  const variable_list out = LmHeadLossFunction::apply(h, weight, t, chunk_tokens, ignore_index, compute);
  return {out[0], out[1].view(targets.sizes())};
}

at::Tensor lm_head_loss_sum(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                            int64_t chunk_tokens, int64_t ignore_index) {
  return lm_head_loss(hidden, weight, targets, chunk_tokens, ignore_index).sum;
}

at::Tensor lm_head_nll(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                       int64_t chunk_tokens, int64_t ignore_index) {
  check_shapes(hidden, weight, targets);
  at::NoGradGuard no_grad;
  const at::ScalarType compute = compute_dtype(hidden, weight);
  const at::Tensor h = hidden.reshape({-1, hidden.size(-1)});
  return run_slices(h, weight, targets.reshape(-1), chunk_tokens, ignore_index, compute, false, false)
      .nll.view(targets.sizes());
}

}  // namespace segtrain::models
