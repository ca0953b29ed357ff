#pragma once
// The LM head and cross-entropy over slices of the tokens, so the full
// [tokens x vocab] logits never exist at once (train.loss_chunk_tokens).
//
// Each slice of `chunk_tokens` rows of the hidden states [N,D] gets its logits
// h W^T [chunk,V], their fp32 log-softmax and the negative log-likelihood of its
// targets; with gradients, the same pass also turns the slice's log-softmax into
// d loss / d logits = softmax - onehot and folds them into d hidden (its rows) and
// d W (accumulated in fp32), so backward only scales those by the incoming
// gradient. Same loss and gradients as at::cross_entropy on the whole logits,
// within fp32 rounding (tests/models/lm_head_loss_test.cpp).
//
// Precision follows what the unchunked head does: under autocast for the hidden
// states' device the head's matmuls run in the autocast dtype (bf16) and their
// logits are then cast to fp32, as `linear` under autocast followed by
// .to(kFloat) does; otherwise in the promoted dtype of hidden and W. Autocast is
// off inside (the casts are explicit).
#include <ATen/ATen.h>

#include <cstdint>
#include <optional>

namespace segtrain::models {

// train.loss_chunk_tokens: nullopt is auto, slices of about this many bytes of fp32 logits,
inline constexpr int64_t kAutoLossChunkBytes = int64_t{64} << 20;
// and while the head trains, of d_model tokens up to this many bytes (Llama-3-8B: 512 tokens).
inline constexpr int64_t kMaxTrainedLossChunkBytes = int64_t{256} << 20;
// Auto slices of at least this many tokens hold a multiple of it: a slice's tokens are a
// dimension of the head's GEMMs, which cuBLAS covers in tiles of 64 to 256; 130 tokens (64 MiB
// of Llama-3's fp32 logits) would pay two 128-token tiles for the work of about one.
inline constexpr int64_t kLossChunkTileTokens = 128;
// PyTorch's default ignore_index, which data::kNoTarget also is.
inline constexpr int64_t kIgnoreTarget = -100;
// The 16-bit head GEMMs' vocabulary width is rounded up to a multiple of this (head_gemm_width).
inline constexpr int64_t kHeadGemmAlignment = 64;

// The width of the head's GEMMs for logits of dtype `compute`: for 16-bit logits, vocab rounded
// up to a multiple of kHeadGemmAlignment. The three GEMMs that touch the logits (h W^T, and
// d hidden = g W and d W = g^T h from their gradient g) run over that many vocabulary rows: cuBLAS's
// fast 16-bit kernels need every dimension and leading dimension a multiple of 8 elements, and
// GPT-2's 50,257 rows sent it to sm75-era `align1` kernels, 5-7x slower on an H200 than at 50,304
// (bench/gpu_logits_gemm_bench.sh, docs/gpus.md); padding only the logits' rows gained for d W
// alone. So the GEMMs take a 16-bit copy of W with zero rows to this width (head_weight_for_gemms):
// the padding's logits are exactly 0, no loss reads them, their gradient columns stay 0, and d W's
// padding rows are dropped. Where llm.c and Megatron pad the vocabulary of the weights themselves,
// the model's vocabulary stays vocab (the loss, checkpoints, HF export). fp32 logits stay vocab
// wide: cuBLAS's fp32 GEMMs ran the same either way, and their loss's log-softmax would first copy
// padded rows whole (16-bit ones it converts to fp32 anyway).
int64_t head_gemm_width(int64_t vocab, at::ScalarType compute);

// The head's weight [V,D] as its GEMMs read it: in `compute`, with head_gemm_width(V, compute) - V
// zero rows after it (the weight converted, without a copy where it is already that dtype and width).
at::Tensor head_weight_for_gemms(const at::Tensor& weight, at::ScalarType compute);

// How a slice's buffers are made, which the auto slice size is measured in: ATen's composite
// cross-entropy (about three fp32 logits a token: its log-softmax, exp and a cast), or the fused
// kernel over 16-bit logits (one 16-bit row of the padded width a token, the gradient written in place;
// kernels/cross_entropy.h).
enum class HeadSliceBuffers { composite_fp32, kernel_16bit };

// Tokens per slice for a configured value; 0 means off: the caller computes the whole
// logits at once. nullopt is auto: with the composite, max(1, 64 MiB / (vocab * 4), min(trained_head_width,
// 256 MiB / (vocab * 4))), rounded down to a multiple of kLossChunkTileTokens where it holds
// one. trained_head_width is D when the head's weight [V,D] takes a gradient
// (training), else 0: each slice then adds its share to the fp32 [V,D] gradient, a read and a
// write of it, and slices of D tokens keep that traffic below the slices' own ([D,V] logits
// each); 64 MiB slices at GPT-2 medium's vocabulary (333 tokens) made it 3 times larger. The
// cap bounds a slice's buffers (about 3 of its fp32 logits) to 0.75 GiB for the largest heads.
// With the 16-bit kernel the same buffer budgets (192 MiB, and 768 MiB while the head trains) hold
// 6 times as many tokens (2 bytes a padded column, not 12 a column), and a trained head's slices grow
// to 4 D tokens within them (or the frozen budget's tokens, where those are more): a quarter of the d W
// passes, in no more memory than the composite's D tokens before rounding (8 D padded V <= 12 D V bytes for
// V >= 126; bench/memory_table.py's bound). GPT-2 medium's 8,192 tokens a micro-batch: 2 slices of
// 4,096 (8 of 1,024 with the composite); Llama-3.2-1B's 16,384: 6 of up to 3,072 (32 of 512).
int64_t loss_chunk_tokens_for(std::optional<int64_t> configured, int64_t vocab, int64_t trained_head_width = 0,
                              HeadSliceBuffers buffers = HeadSliceBuffers::composite_fp32);

// loss_chunk_tokens_for for the slices lm_head_loss_sum would run over these hidden states and weight
// right here: the head trains when grad mode is on and the weight takes a gradient; the buffers are the
// kernel's where cross_entropy_rows would take it for logits in the head's compute dtype (autocast's,
// else the promoted dtype of hidden and weight) on hidden's device.
int64_t loss_chunk_tokens_for(std::optional<int64_t> configured, const at::Tensor& hidden, const at::Tensor& weight);

// Sum over the targets that are not ignore_index of -log softmax(hidden W^T)[target],
// as an fp32 scalar, differentiable with respect to hidden [...,D] and weight [V,D]
// (each when it requires a gradient). targets: int64 [...], the leading shape of hidden.
at::Tensor lm_head_loss_sum(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                            int64_t chunk_tokens, int64_t ignore_index = kIgnoreTarget);

// The same sum, and the terms it adds up, per token in the shape of targets (fp32, 0 where the
// target is ignored, without a gradient): a data mixture's loss by source (trainer/train/step_loss.h).
struct LmHeadLoss {
  at::Tensor sum;        // lm_head_loss_sum's, differentiable
  at::Tensor token_nll;  // [...] the targets' shape, detached
};
LmHeadLoss lm_head_loss(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                        int64_t chunk_tokens, int64_t ignore_index = kIgnoreTarget);

// The same per token, fp32 in the shape of targets (0 where the target is
// ignored), without gradients (evaluation).
at::Tensor lm_head_nll(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                       int64_t chunk_tokens, int64_t ignore_index = kIgnoreTarget);

}  // namespace segtrain::models
