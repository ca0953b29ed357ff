// The training loop and its step (trainer_class.h). A step is three calls: forward_backward
// (this rank's micro-batches), reduce_totals (the gradients and the step's totals summed over
// ranks: its one host read) and apply_update (clip, optimizer step, zero the gradients): the
// device work on each side of the host read is one call, the unit a CUDA graph captures
// (SEGTRAIN_CUDA_GRAPH: trainer_captured_step.cpp). A stop
// asked for on any rank is agreed by all, so that every rank stops after the same step.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "common/signals.h"
#include "kernels/forward_paths.h"
#include "trainer/runtime/device.h"
#include "trainer/train/step_loss.h"
#include "trainer/train/trainer_class.h"

namespace segtrain::trainer {

void Trainer::train() {
  window_start_ = Clock::now();
  Clock::time_point counted_until = window_start_;
  bool first_step = true;
  while (!cadence_->finished(state_.step)) {
    // The first step's forward says which paths it took (kernels/forward_paths.h): a plan line
    // can only say what is switched on.
    if (first_step) kernels::start_recording_paths();
    const StepResult step = train_step();
    if (first_step) {
      first_step = false;
      const std::string paths = kernels::describe_paths(kernels::stop_recording_paths());
      if (!paths.empty()) log::info("step ", state_.step, "'s forward took: ", paths);
    }
    // Counted before this step's checkpoint is taken, so that the checkpoint's figure
    // covers everything up to it; the saving and evaluating after a step count in the next.
    const Clock::time_point now = Clock::now();
    if (state_.train_seconds) *state_.train_seconds += std::chrono::duration<double>(now - counted_until).count();
    counted_until = now;
    if (cadence_->should_log(state_.step)) log_step(step);
    // A signal during the last step lets the run finish: final/ is saved, then it exits 128 + signal.
    if (step.stop_signal && !cadence_->finished(state_.step)) stop_after_step(step.stop_signal);
    if (cadence_->should_checkpoint(state_.step)) waiting_for_saves([&] { save_step_checkpoint(); });
    if (cadence_->should_evaluate(state_.step)) {
      release_cuda_graphs_for_evaluation();  // its memory is the ordinary step's, not on top of the graphs' pools
      evaluate_during_training();
    }
  }
  release_cuda_graphs_for_evaluation();  // so is the final evaluation's
  metrics_->newline();
}

// The loss is the mean over the loss tokens of the whole step (all
// micro-batches, all ranks). Backward runs on the summed loss, and the
// gradient is divided by the step's count afterwards, together with the
// clipping: the count over all ranks then joins the step's one reduction
// (step_totals.h) instead of needing a round trip of its own before backward.
StepResult Trainer::train_step() {
  const int64_t waits_before = group_ ? group_->host_waits() : 0;
  std::optional<StepStream> stream;  // a captured step's own stream (trainer/runtime/cuda_graph.h)
  if (graph_mode_ != CudaGraphMode::off) stream.emplace(device_);
  const LocalTotals local = forward_backward();
  const StepTotals totals = reduce_totals(local);
  state_.cursor = local.cursor_after;
  state_.tokens += plan_.tokens_per_step;
  for (size_t i = 0; i < state_.source_tokens.size(); ++i)  // every rank knows the step's draws (data/loader.h)
    state_.source_tokens[i].second += local.source_samples[i] * plan_.sample_length;
  state_.loss_tokens += totals.loss_tokens;
  const StepResult result = apply_update(totals);
  ++state_.step;
  window_tokens_ += plan_.tokens_per_step;
  ++window_steps_;
  if (group_) window_host_waits_ += group_->host_waits() - waits_before;
  return result;
}

// The step's micro-batches on this rank: all fetched first, then each one's forward and
// backward, its loss summed on the device.
LocalTotals Trainer::forward_backward() {
  LocalTotals local;
  std::vector<MicroBatch> micro;
  for (int64_t k = 0; k < batch_.grad_accum; ++k) {
    data::Batch batch = loader_->next();
    local.cursor_after = batch.cursor;
    local.source_samples.resize(batch.step_samples.size());
    for (size_t i = 0; i < batch.step_samples.size(); ++i) local.source_samples[i] += batch.step_samples[i];
    micro.push_back(to_tensors(batch, device_));
    local.loss_tokens += micro.back().loss_tokens;
    const auto& tokens = micro.back().source_loss_tokens;
    local.source_loss_tokens.resize(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) local.source_loss_tokens[i] += tokens[i];
  }
  if (graph_mode_ != CudaGraphMode::off) forward_backward_captured(micro, local);
  else run_micro_batches_into(micro, local);
  return local;
}

void Trainer::run_micro_batches_into(const std::vector<MicroBatch>& micro, LocalTotals& local) {
  const auto options = at::TensorOptions().dtype(at::kDouble).device(device_);
  local.loss_sum = at::zeros({}, options);
  local.source_loss_sums = local.source_loss_tokens.empty()
                               ? at::Tensor()
                               : at::zeros({static_cast<int64_t>(local.source_loss_tokens.size())}, options);
  run_micro_batches(micro, local.loss_sum, local.source_loss_sums.defined() ? &local.source_loss_sums : nullptr);
}

void Trainer::run_micro_batches(const std::vector<MicroBatch>& micro, at::Tensor& loss_sum,
                                at::Tensor* source_loss_sums) {
  const bool master = optimizer_->keeps_master_weights();
  for (size_t k = 0; k < micro.size(); ++k) {
    MicroBatchLoss loss;
    {
      Autocast autocast(c_.train.precision == Precision::bf16, device_.type());
      loss = micro_batch_loss(model_, micro[k], c_.train.loss_chunk_tokens);
    }
    // The last micro-batch's backward reduces over ranks; with master weights
    // every one's does, into the optimizer's fp32 sums.
    if (sync_ && (master || k + 1 == micro.size())) sync_->arm();
    loss.sum.backward();
    loss_sum += loss.sum.detach().to(at::kDouble);
    if (source_loss_sums && loss.by_source.defined()) *source_loss_sums += loss.by_source.to(at::kDouble);
    if (master) {
      if (sync_) sync_->finish();
      else optimizer_->accumulate_local();
      // The next micro-batch's gradients start from 0; the last one's are zeroed once, by the optimizer's
      // zero_grad at the step's end (on every path of apply_update, the captured update's too).
      if (k + 1 < micro.size()) flat_->zero_grad();
    }
  }
}

// The gradients' reduction finished, then the step's totals summed over ranks and read on the
// host (reduce_step_totals): the step's only host round trip. A checkpoint save in flight learns
// from them whether every rank wrote its part.
StepTotals Trainer::reduce_totals(const LocalTotals& local) {
  if (sync_ && !optimizer_->keeps_master_weights()) sync_->finish();
  // Unsharded, every rank holds the whole reduced gradient: rank 0 counts it.
  const bool counts_norm = optimizer_->sharded() || dist_.rank == 0;
  const StepTotals totals = reduce_step_totals(
      group_.get(),
      {stop_signal(), local.loss_tokens, local.loss_sum,
       counts_norm ? optimizer_->grad_square_sum() : at::zeros({}, local.loss_sum.options()), checkpoints_->part(),
       local.source_loss_sums, local.source_loss_tokens},
      device_);
  waiting_for_saves([&] { checkpoints_->settle(totals.saves_written, totals.saves_failed); });  // a save in flight
  return totals;
}

// The step's mean loss and gradient norm from the totals, then the update at this step's lr:
// the gradient scaled by the clipping over the loss-token count, the optimizer's step, the
// gradients zeroed. A non-finite loss or gradient never reaches the weights; a step without
// loss tokens (possible with prefix) has nothing to learn from.
StepResult Trainer::apply_update(const StepTotals& totals) {
  StepResult result;
  result.lr = schedule_.at(state_.step);
  result.stop_signal = totals.stop_signal;
  result.loss_tokens = totals.loss_tokens;
  result.source_loss_sums = totals.source_loss_sums;
  result.source_loss_tokens = totals.source_loss_tokens;
  const double denominator = static_cast<double>(std::max<int64_t>(totals.loss_tokens, 1));
  result.loss = totals.loss_sum / denominator;
  const double grad_norm = std::sqrt(totals.grad_square_sum) / denominator;
  result.grad_norm = std::isfinite(result.loss) ? grad_norm : result.loss;
  if (!std::isfinite(result.loss) || !std::isfinite(result.grad_norm)) {
    ++state_.skipped_steps;
    ++state_.consecutive_bad_steps;
    log::warn("step ", state_.step + 1, ": non-finite ", std::isfinite(result.loss) ? "gradient norm" : "loss",
              "; step skipped (", state_.consecutive_bad_steps, " in a row)");
    if (state_.consecutive_bad_steps >= c_.train.max_bad_steps)
      throw std::runtime_error("aborting: " + std::to_string(state_.consecutive_bad_steps) +
                               " consecutive steps had a non-finite loss (train.max_bad_steps); check the learning "
                               "rate, the precision and the initial weights");
  } else {
    state_.consecutive_bad_steps = 0;
    if (result.loss_tokens > 0) {
      waiting_for_saves([&] { checkpoints_->wait_for_copy(); });  // a save in flight has copied what step() changes
      if (update_parameters(result.lr, clip_factor(grad_norm, c_.train.grad_clip) / denominator)) return result;
    }
  }
  optimizer_->zero_grad();
  return result;
}

// A stop requested on any rank, agreed by all with one small all-reduce (how
// many ranks have SIGTERM, how many SIGINT; SIGTERM wins), so that every rank
// stops at the same point with the same exit code. 0: no stop.
int Trainer::agreed_stop_signal() {
  const int signal = stop_signal();
  if (!group_) return signal;
  const auto counts = global_sum({signal == SIGTERM ? 1.0 : 0.0, signal == SIGINT ? 1.0 : 0.0});
  return counts[0] > 0 ? SIGTERM : counts[1] > 0 ? SIGINT : 0;
}

// Every rank stops after the same step when any of them was signalled (the
// step's totals carried the signal).
void Trainer::stop_after_step(int signal) {
  metrics_->newline();
  save_step_checkpoint(/*wait=*/true);
  log::warn("signal ", signal, ": saved step ", state_.step, "; continue with --resume");
  throw Interrupted(signal);
}

// Sums over ranks (identity for one process), so every rank takes the same decisions.
std::vector<double> Trainer::global_sum(std::vector<double> values) {
  if (!group_) return values;
  std::vector<at::Tensor> t{at::tensor(values, at::kDouble)};
  group_->all_reduce_sum(t);
  return std::vector<double>(t[0].data_ptr<double>(), t[0].data_ptr<double>() + values.size());
}

}  // namespace segtrain::trainer
