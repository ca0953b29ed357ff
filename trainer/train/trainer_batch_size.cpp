// The Trainer's batch (trainer_class.h): train.micro_batch_size, grad_accum and
// global_batch_size resolved for this run's ranks, with micro_batch_size auto measured on the
// run's own model, optimizer and device before the first step (batch_size.h).
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/log.h"
#include "data/mixture.h"
#include "data/sampler.h"
#include "data/sampler_kind.h"
#include "trainer/runtime/device.h"
#include "trainer/runtime/memory.h"
#include "trainer/train/random_state.h"
#include "trainer/train/rank_failure.h"
#include "trainer/train/step_loss.h"
#include "trainer/train/trainer_class.h"

namespace segtrain::trainer {
namespace {

// The positions of a measuring pass: the farthest the data can reach (L_e - 1, or L_t - 1 for a
// sampler that stays within L_t), spread over the sequence as a sampler spreads them, since an
// attention whose kernel depends on the span (ALiBi folded into q·k, or its bias tensor) must be
// measured at the span training will see.
std::vector<int32_t> reaching_positions(const data::DataConfig& data, int64_t length) {
  int64_t last = length - 1;
  for (const auto& source : data::data_sources(data))
    if (!data::sampler_kind(source.data.sampler).within_train_length)
      last = std::max(last, source.data.extended_length - 1);
  std::vector<int32_t> positions(static_cast<size_t>(length));
  for (int64_t j = 0; j < length; ++j)
    positions[static_cast<size_t>(j)] = static_cast<int32_t>(length == 1 ? 0 : j * last / (length - 1));
  return positions;
}

}  // namespace

// The micro-batch, then, with model.activation_checkpointing auto, the blocks recomputed at it (a
// micro-batch auto measured with every block recomputed: the most sequences, then the fewest blocks).
void Trainer::size_batch() {
  size_micro_batch();
  size_checkpointing();
}

void Trainer::size_micro_batch() {
  if (c_.train.micro_batch_size) {
    batch_ = batch_shape(c_.train, dist_.world_size, *c_.train.micro_batch_size);
    return;
  }
  const int64_t sequences = sequences_per_rank(c_.train, dist_.world_size);
  MicroBatchChoice choice;
  RankFailure failure;
  {
    const KeptGenerators generators(device_);  // the passes' dropout draws nothing the run would
    failure = kept_failure(group_ != nullptr, [&] {
      choice = choose_micro_batch(device_, sequences, memory_budget(c_.train, device_, dist_.local_world_size),
                                  [this](int64_t size) { measuring_pass(size); });
    });
  }
  // Every rank takes the smallest choice (ranks on other devices, or with more held, may differ).
  if (group_) {
    std::vector<double> chosen(static_cast<size_t>(dist_.world_size), 0.0);
    chosen[static_cast<size_t>(dist_.rank)] =
        failure.failed ? failure.code() : static_cast<double>(choice.micro_batch_size);
    const auto all = global_sum(chosen);
    throw_if_a_rank_failed(failure, dist_.rank, all, "train.micro_batch_size auto");
    const auto smallest = std::min_element(all.begin(), all.end());
    if (const auto agreed = static_cast<int64_t>(*smallest); agreed != choice.micro_batch_size) {
      log::info("rank ", dist_.rank, ": micro-batch ", choice.micro_batch_size, " fits here; ", agreed,
                " fits every rank");
      choice.peak_bytes = choice.peak_bytes - choice.fit.at(choice.micro_batch_size) + choice.fit.at(agreed);
      choice.peak_measured = false;
      choice.micro_batch_size = agreed;
    }
  }
  batch_ = batch_shape(c_.train, dist_.world_size, choice.micro_batch_size);
  auto_batch_ = choice;
  reset_peak_memory(device_);  // the run's peaks are its steps', not the measuring passes'
}

void Trainer::size_checkpointing() {
  if (model_config_.activation_checkpointing.kind != models::ActivationCheckpointing::Kind::automatic) return;
  CheckpointingChoice choice;
  RankFailure failure;
  {
    const KeptGenerators generators(device_);
    failure = kept_failure(group_ != nullptr, [&] {
      choice = choose_checkpointed_blocks(device_, model_config_.n_layers,
                                          memory_budget(c_.train, device_, dist_.local_world_size), [this](int64_t k) {
                                            model_->set_activation_checkpointing(
                                                models::ActivationCheckpointing::first_blocks(k));
                                            measuring_pass(batch_.micro_batch_size);
                                          },
                                          auto_batch_ ? std::optional<int64_t>(auto_batch_->held_bytes +
                                                                               auto_batch_->left_bytes)
                                                      : std::nullopt);
    });
  }
  // Every rank recomputes the most blocks any rank needs.
  if (group_) {
    std::vector<double> chosen(static_cast<size_t>(dist_.world_size), 0.0);
    chosen[static_cast<size_t>(dist_.rank)] = failure.failed ? failure.code() : static_cast<double>(choice.blocks);
    const auto all = global_sum(chosen);
    throw_if_a_rank_failed(failure, dist_.rank, all, "model.activation_checkpointing auto");
    const auto most = std::max_element(all.begin(), all.end());
    if (const auto agreed = static_cast<int64_t>(*most); agreed != choice.blocks) {
      log::info("rank ", dist_.rank, ": ", choice.blocks, " recomputed blocks fit here; ", agreed, " fit every rank");
      // By the line: every block recomputed peaks as that pass did; fewer kept, a block's bytes fewer each.
      choice.peak_bytes = agreed == choice.of
                              ? choice.every_peak_bytes
                              : choice.peak_bytes - (agreed - choice.blocks) * choice.kept_block_bytes.value_or(0);
      choice.peak_measured = false;
      choice.blocks = agreed;
    }
  }
  model_config_.activation_checkpointing = models::ActivationCheckpointing::first_blocks(choice.blocks);
  model_->set_activation_checkpointing(model_config_.activation_checkpointing);
  auto_checkpointing_ = choice;
  reset_peak_memory(device_);  // the run's peaks are its steps', not the measuring passes'
}

// One micro-batch's forward and backward as a step runs it, on `sequences` sequences of the
// longest positions with every target scored (what a step can hold at most); the gradients
// are dropped after, also after a pass that ran out of memory.
void Trainer::measuring_pass(int64_t sequences) {
  const int64_t length = data::sample_length(data::data_sources(c_.data).front().data);
  const auto n = static_cast<size_t>(sequences * length);
  data::Batch batch;
  batch.batch_size = sequences;
  batch.length = length;
  batch.tokens.assign(n, 0);
  batch.targets.assign(n, 0);
  batch.loss_mask.assign(n, 1);
  const std::vector<int32_t> positions = reaching_positions(c_.data, length);
  for (int64_t s = 0; s < sequences; ++s) batch.positions.insert(batch.positions.end(), positions.begin(), positions.end());
  const MicroBatch micro = to_tensors(batch, device_);
  try {
    at::Tensor loss;
    {
      Autocast autocast(c_.train.precision == Precision::bf16, device_.type());
      loss = micro_batch_loss(model_, micro, c_.train.loss_chunk_tokens).sum;
    }
    loss.backward();
  } catch (...) {
    optimizer_->zero_grad();  // a pass out of memory in backward leaves some gradients summed
    throw;
  }
  optimizer_->zero_grad();
}

}  // namespace segtrain::trainer
