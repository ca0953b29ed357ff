// The captured step (SEGTRAIN_CUDA_GRAPH, trainer/runtime/cuda_graph.h): forward_backward's
// device work and the update replayed as two CUDA graphs, the step's host read between them.
// Each step's micro-batches are copied into tensors that stay (static_micro_), the loss summed
// into one that stays (static_loss_sum_; a mixture's by source into static_source_loss_sums_, through
// the micro-batches' one-hot rows, which stay too), gradients stay allocated (Optimizer::keep_gradients);
// the learning rate and clipping factor reach the update graph through device scalars
// (FusedStepScalars), and a skipped step's gradients are zeroed outside it.
#include <string>

#include "common/error.h"
#include "common/log.h"
#include "models/spec/arch.h"
#include "models/spec/auto_values.h"
#include "trainer/runtime/memory.h"
#include "trainer/train/trainer_class.h"

namespace segtrain::trainer {

namespace {

// Eager steps before the capture: the first makes cuBLAS's handles and workspaces, the
// allocator's blocks and the optimizer's state; PyTorch's own examples warm up 3. After an
// evaluation dropped the graphs (release_cuda_graphs) one eager step refills the allocator.
constexpr int64_t kGraphWarmupSteps = 3;
constexpr int64_t kGraphRewarmSteps = 1;

// Why this step's micro-batches cannot go where the captured step's went ("" when they can).
std::string changed_shape(const std::vector<MicroBatch>& fixed, const std::vector<MicroBatch>& fresh) {
  if (fresh.size() != fixed.size())
    return "a step of " + std::to_string(fresh.size()) + " micro-batches after steps of " + std::to_string(fixed.size());
  for (size_t k = 0; k < fresh.size(); ++k) {
    if (fixed[k].tokens.sizes() != fresh[k].tokens.sizes())
      return "micro-batch " + std::to_string(k) + " of this step is " + c10::str(fresh[k].tokens.sizes()) +
             " where the captured step's is " + c10::str(fixed[k].tokens.sizes()) + "; a captured step needs one shape";
    if (fixed[k].source_loss_tokens.size() != fresh[k].source_loss_tokens.size())  // a run's sources stay
      return "micro-batch " + std::to_string(k) + " of this step counts " +
             std::to_string(fresh[k].source_loss_tokens.size()) + " sources where the captured step's counted " +
             std::to_string(fixed[k].source_loss_tokens.size());
  }
  return "";
}

// `fresh`'s tensors into `fixed`'s (same shapes: changed_shape), and its host values.
void copy_micro_batch(MicroBatch& fixed, const MicroBatch& fresh) {
  fixed.tokens.copy_(fresh.tokens, /*non_blocking=*/true);
  fixed.positions.copy_(fresh.positions, /*non_blocking=*/true);
  fixed.targets.copy_(fresh.targets, /*non_blocking=*/true);
  if (fixed.source_one_hot.defined()) fixed.source_one_hot.copy_(fresh.source_one_hot, /*non_blocking=*/true);
  fixed.loss_tokens = fresh.loss_tokens;
  fixed.source_loss_tokens = fresh.source_loss_tokens;
  fixed.bounds = fresh.bounds;
}

}  // namespace

std::string Trainer::cuda_graph_refusal() const {
  if (graph_mode_ == CudaGraphMode::captured && !device_.is_cuda())
    return "it captures a CUDA device's step; this run computes on " + device_.str();
  if (dist_.world_size > 1)
    return "it captures one process's step; this run has " + std::to_string(dist_.world_size) +
           " ranks, whose gradient reduction runs while backward does";
  if (models::position_scheme(model_config_.arch) == models::PositionScheme::alibi)
    return "ALiBi decides for each batch whether it folds its bias into q.k (models/modules/alibi_folded.h)";
  if (models::positions_depend_on_length(model_config_))
    return "the model's RoPE scaling recomputes its table from each batch's largest position (a dynamic scaling)";
  // Each evaluation drops the graphs (release_cuda_graphs): the first capture needs the warm-up steps and
  // itself between two.
  if (graph_mode_ == CudaGraphMode::captured && c_.train.eval_every > 0 && c_.train.eval_every <= kGraphWarmupSteps)
    return "train.eval_every " + std::to_string(c_.train.eval_every) + " drops the graphs for an evaluation before " +
           std::to_string(kGraphWarmupSteps) + " warm-up steps and the capture have run";
  return "";
}

std::string Trainer::describe_cuda_graph() const {
  const std::string asked = graph_automatic_ ? "auto" : "1";
  switch (graph_mode_) {
    case CudaGraphMode::captured:
      return "the step captured as two CUDA graphs after " + std::to_string(kGraphWarmupSteps) +
             " warm-up steps, dropped for each evaluation and captured again after " +
             std::to_string(kGraphRewarmSteps) + " eager step (SEGTRAIN_CUDA_GRAPH=" + asked + ")";
    case CudaGraphMode::static_path:
      return "the captured step's static path, not captured (SEGTRAIN_CUDA_GRAPH=static)";
    case CudaGraphMode::off:
      break;
  }
  if (graph_automatic_) return "the ordinary step, not captured: " + graphs_off_because_ + " (SEGTRAIN_CUDA_GRAPH=auto)";
  return "";
}

void Trainer::release_cuda_graphs() {
  if (!graphed_forward_backward_) return;
  graphed_forward_backward_.reset();  // a graph still replaying is freed when it completes (cudaGraphExecDestroy)
  graphed_update_.reset();
  static_micro_.clear();
  static_loss_sum_ = at::Tensor();
  static_source_loss_sums_ = at::Tensor();
  release_cached_memory(device_);  // the pools' blocks back to the device (cudaFree waits for the replays)
}

void Trainer::release_cuda_graphs_for_evaluation() {
  if (!graphed_forward_backward_) return;
  release_cuda_graphs();
  // Kept gradients (fp32 parameters' own) are dropped as the ordinary step drops them; the next
  // step's first backward makes them again and keep_gradients keeps them (a bucket's stay).
  optimizer_->stop_keeping_gradients();
  optimizer_->zero_grad();
}

void Trainer::leave_cuda_graphs(const std::string& why) {
  log::warn("step ", state_.step + 1, ": ", why, "; the ordinary step from now on (SEGTRAIN_CUDA_GRAPH=auto)");
  graph_mode_ = CudaGraphMode::off;
  optimizer_->stop_keeping_gradients();  // a parameter without a gradient is skipped again, as the ordinary step does
  release_cuda_graphs();
}

void Trainer::forward_backward_captured(const std::vector<MicroBatch>& micro, LocalTotals& local) {
  const bool first = !graphed_forward_backward_;
  if (first) {
    const int64_t warmup = graphs_captured_ ? kGraphRewarmSteps : kGraphWarmupSteps;
    graphed_forward_backward_ = std::make_unique<GraphedCall>(graph_mode_, warmup);
    graphed_update_ = std::make_unique<GraphedCall>(graph_mode_, warmup);
    static_micro_ = micro;
    for (auto& m : static_micro_) {  // copies that stay, not the fresh tensors
      m.tokens = m.tokens.clone();
      m.positions = m.positions.clone();
      m.targets = m.targets.clone();
      if (m.source_one_hot.defined()) m.source_one_hot = m.source_one_hot.clone();
    }
    const auto options = at::TensorOptions().dtype(at::kDouble).device(device_);
    static_loss_sum_ = at::zeros({}, options);
    static_source_loss_sums_ = local.source_loss_tokens.empty()
                                   ? at::Tensor()
                                   : at::zeros({static_cast<int64_t>(local.source_loss_tokens.size())}, options);
  } else {
    if (const std::string changed = changed_shape(static_micro_, micro); !changed.empty()) {
      if (!graph_automatic_) throw std::runtime_error("SEGTRAIN_CUDA_GRAPH: " + changed);
      leave_cuda_graphs(changed);
      run_micro_batches_into(micro, local);
      return;
    }
    for (size_t k = 0; k < micro.size(); ++k) {
      model_->check_positions(micro[k].bounds);  // the forward's own check, which a replay skips
      copy_micro_batch(static_micro_[k], micro[k]);
    }
  }
  // No other thread may touch the device while a graph is captured: a save still copying waits.
  if (graphed_forward_backward_->captures_next())
    waiting_for_saves([&] { checkpoints_->wait_for_copy(); });
  (*graphed_forward_backward_)([&] {
    static_loss_sum_.zero_();
    if (static_source_loss_sums_.defined()) static_source_loss_sums_.zero_();
    run_micro_batches(static_micro_, static_loss_sum_,
                      static_source_loss_sums_.defined() ? &static_source_loss_sums_ : nullptr);
  });
  local.loss_sum = static_loss_sum_;
  local.source_loss_sums = static_source_loss_sums_;
  // After the first backward (an eager warm-up): every gradient stays from now on, and a parameter
  // that took none would be updated every step with a zero one, where the ordinary step skips it.
  if (first) {
    if (const std::vector<std::string> without = optimizer_->without_gradient(); !without.empty()) {
      const std::string why = std::to_string(without.size()) + " trainable parameter(s) took no gradient in the " +
                              "first step (" + without.front() + (without.size() > 1 ? ", ..." : "") +
                              "); a captured step would update them every step with a zero gradient";
      if (!graph_automatic_)
        throw std::runtime_error("SEGTRAIN_CUDA_GRAPH: " + why +
                                 ": freeze them (train.freeze) or train without SEGTRAIN_CUDA_GRAPH");
      leave_cuda_graphs(why);  // local keeps this step's sums: it ran eagerly, they are whole
      return;
    }
    optimizer_->keep_gradients();
  }
  if (graphed_forward_backward_->just_captured()) {
    if (graphs_captured_)  // after an evaluation dropped them
      log::info("step ", state_.step + 1, ": the step's CUDA graphs captured again after the evaluation");
    else
      log::info("step ", state_.step + 1, ": forward and backward captured as a CUDA graph, replayed from now on");
  }
}

bool Trainer::update_parameters(double lr, double grad_factor) {
  if (graph_mode_ == CudaGraphMode::off) {
    optimizer_->step(lr, grad_factor);
    return false;
  }
  optimizer_->set_step_scalars(lr, grad_factor);  // device scalars the graph reads
  (*graphed_update_)([&] {
    optimizer_->update();
    optimizer_->zero_grad();
  });
  optimizer_->count_step();
  if (graphed_update_->just_captured() && !graphs_captured_) {
    log::info("step ", state_.step + 1, ": the update captured as a CUDA graph, replayed from now on");
    graphs_captured_ = true;  // both halves: later captures warm up one step and say one line
  }
  return true;
}

}  // namespace segtrain::trainer
