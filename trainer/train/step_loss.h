#pragma once
// The loss of one optimizer step: cross-entropy summed over the loss-masked
// targets of every micro-batch, divided once by the step's loss-token count, so
// micro-batches (and ranks) with more loss tokens weigh more and one with none
// contributes exactly zero.
#include <ATen/ATen.h>
#include <c10/core/Device.h>

#include <optional>
#include <vector>

#include "data/loader.h"
#include "models/modules/transformer.h"

namespace segtrain::trainer {

struct MicroBatch {
  at::Tensor tokens, positions, targets;  // [B, T] int64 on the device; masked targets = kNoTarget
  int64_t loss_tokens = 0;
  models::PositionBounds bounds;  // of positions, read from the host batch: the forward never syncs
  // A mixture of several sources (data.mixture): each source's loss tokens here, and each sample's
  // source as a one-hot row ([B, sources] fp32 on the device). Empty and undefined for a single store.
  std::vector<int64_t> source_loss_tokens;
  at::Tensor source_one_hot;
};

MicroBatch to_tensors(const data::Batch& batch, const c10::Device& device);

// A micro-batch's summed loss, and a mixture's split of it by source.
struct MicroBatchLoss {
  at::Tensor sum;        // fp32 scalar, differentiable
  at::Tensor by_source;  // [sources] fp32, detached: each source's part of sum; undefined for a single store
};

// Sum of -log p(target) over the targets that are not kNoTarget, in fp32.
at::Tensor summed_loss(const at::Tensor& logits, const at::Tensor& targets);

// summed_loss of the model on one micro-batch, run under the caller's autocast.
// train.loss_chunk_tokens (nullopt: auto) other than 0 takes the LM head and the
// cross-entropy over slices of the tokens (models/modules/lm_head_loss.h), so the whole
// [tokens x vocab] logits never exist; 0 computes them at once. A mixture's micro-batch also
// adds each token's loss (which the sum is made of, no second pass) to its sample's source.
MicroBatchLoss micro_batch_loss(models::TransformerLM& model, const MicroBatch& m,
                                std::optional<int64_t> loss_chunk_tokens);

}  // namespace segtrain::trainer
