#pragma once
// The loss of one optimizer step: cross-entropy summed over the loss-masked
// targets of every micro-batch, divided once by the step's loss-token count, so
// micro-batches (and ranks) with more loss tokens weigh more and one with none
// contributes exactly zero.
#include <ATen/ATen.h>
#include <c10/core/Device.h>

#include "data/loader.h"

namespace segtrain::trainer {

struct MicroBatch {
  at::Tensor tokens, positions, targets;  // [B, T] int64 on the device; masked targets = kNoTarget
  int64_t loss_tokens = 0;
};

MicroBatch to_tensors(const data::Batch& batch, const c10::Device& device);

// Sum of -log p(target) over the targets that are not kNoTarget, in fp32.
at::Tensor summed_loss(const at::Tensor& logits, const at::Tensor& targets);

}  // namespace segtrain::trainer
