#pragma once
// The Trainer: one training run's state, and the methods that set it up, step it, evaluate it
// and write its outputs. Private to trainer/train (run_training, trainer.h, is the way in). One
// class, its methods in a file per concern:
//   trainer_setup.cpp       inputs checked, model converted, optimizer, resume, the plan
//   trainer_batch_size.cpp  the step's micro-batches, micro_batch_size auto measured
//   trainer_loop.cpp        the loop, its step (forward_backward, reduce_totals, apply_update),
//                           and what all ranks agree on
//   trainer_outputs.cpp     metrics rows, checkpoints, final/, the closing summary
//   trainer_evaluation.cpp  the periodic and final evaluations
#include <ATen/ATen.h>
#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/loader.h"
#include "data/prompt_tokenizer.h"
#include "data/token_store.h"
#include "data/tokenizer_identity.h"
#include "models/modules/converters/converter.h"
#include "models/modules/transformer.h"
#include "models/spec/base_record.h"
#include "trainer/config/config.h"
#include "trainer/eval/perplexity.h"
#include "trainer/eval/suite.h"
#include "trainer/runtime/cuda_graph.h"
#include "trainer/train/batch_size.h"
#include "trainer/train/budget.h"
#include "trainer/train/cadence.h"
#include "trainer/train/checkpoint_parts.h"
#include "trainer/train/checkpoint_writer.h"
#include "trainer/train/distributed.h"
#include "trainer/train/flat_buckets.h"
#include "trainer/train/gradient_sync.h"
#include "trainer/train/lr_schedule.h"
#include "trainer/train/metrics.h"
#include "trainer/train/optimizer.h"
#include "trainer/train/rank_failure.h"
#include "trainer/train/run_checkpoint.h"
#include "trainer/train/run_directory.h"
#include "trainer/train/step_loss.h"
#include "trainer/train/step_totals.h"
#include "trainer/train/trainer.h"

namespace segtrain::trainer {

// What one optimizer step measured.
struct StepResult {
  double loss = 0;  // mean over the step's loss tokens, all ranks
  double lr = 0;
  double grad_norm = 0;
  int64_t loss_tokens = 0;
  int stop_signal = 0;  // agreed by all ranks with the step's totals
  // A mixture: each source's summed loss and loss tokens in the step, all ranks (empty otherwise).
  std::vector<double> source_loss_sums;
  std::vector<int64_t> source_loss_tokens;
};

// What this rank's micro-batches of a step gave, before any reduction over ranks. A captured step's
// sums are its tensors that stay, overwritten by the next replay: read them (reduce_totals) before.
struct LocalTotals {
  at::Tensor loss_sum;        // fp64 scalar on the device: the summed cross-entropy
  int64_t loss_tokens = 0;    // counted on the host batches
  data::StreamCursor cursor_after;  // where the data continues after the step's last batch
  std::vector<int64_t> source_samples;  // per source: the step's samples over all ranks
  // A mixture of several sources: each one's summed loss (fp64 on the device) and loss tokens
  // on this rank.
  at::Tensor source_loss_sums;
  std::vector<int64_t> source_loss_tokens;
};

class Trainer {
 public:
  using Clock = std::chrono::steady_clock;

  Trainer(const LoadedConfig& loaded, Resume resume);

  void train();
  void save_final();
  void evaluate_final();
  void log_final_evaluation_plan() const;
  void log_evaluation_stopped(int signal) const;
  void log_summary(bool evaluated) const;
  // Ends the process group cleanly (all ranks are done with it, also after an agreed stop).
  void shut_down_group() {
    if (group_) group_->shutdown();
  }

 private:
  void check_inputs(const LoadedConfig& loaded);
  void check_source_tokenizers(const LoadedConfig& loaded, const std::optional<data::TokenizerIdentity>& store_identity);
  void build_model_and_optimizer(const LoadedConfig& loaded);
  void settle_parameter_dtypes();
  void convert_model(const LoadedConfig& loaded, std::future<models::BaseRecord> base_record);
  void assemble_checkpoint_parts();
  void resume_from_checkpoint();
  void settle_cpu_matmul();
  void take_rank_zeros_cpu_matmul(const RankFailure& failure, std::optional<at::ScalarType> forced,
                                  at::ScalarType chosen);
  void size_batch();
  void size_micro_batch();
  void size_checkpointing();
  void measuring_pass(int64_t sequences);
  void plan_steps();
  void count_source_tokens();
  void log_sources() const;
  std::string epochs_text() const;
  void set_up_optimizer(const std::vector<std::pair<std::string, at::Tensor>>& named);
  StepResult train_step();
  // The step's three parts, in order: this rank's micro-batches, their sums over ranks (the
  // step's one host read), the update.
  LocalTotals forward_backward();
  StepTotals reduce_totals(const LocalTotals& local);
  StepResult apply_update(const StepTotals& totals);
  // forward_backward's device work: every micro-batch's forward and backward, the loss summed
  // into loss_sum (what a CUDA graph captures: trainer_captured_step.cpp).
  void run_micro_batches(const std::vector<MicroBatch>& micro, at::Tensor& loss_sum,
                         at::Tensor* source_loss_sums = nullptr);
  // The same into fresh sums of local's (a mixture's by source where local counts sources' tokens).
  void run_micro_batches_into(const std::vector<MicroBatch>& micro, LocalTotals& local);
  // SEGTRAIN_CUDA_GRAPH (trainer/runtime/cuda_graph.h): why this run cannot take the captured
  // step ("" when it can), the plan line's words, the step's halves through their graphs.
  std::string cuda_graph_refusal() const;
  std::string describe_cuda_graph() const;
  // Sets local's loss sum (and a mixture's sums by source): the captured step's tensors that stay.
  void forward_backward_captured(const std::vector<MicroBatch>& micro, LocalTotals& local);
  // The graphs and their memory pools dropped; the next step captures them again (after
  // kGraphRewarmSteps eager ones once they were captured). For an evaluation the kept gradients
  // are dropped too, so that it has the memory the ordinary step would leave it.
  void release_cuda_graphs();
  void release_cuda_graphs_for_evaluation();
  // SEGTRAIN_CUDA_GRAPH=auto meeting what a captured step cannot take after it started (a step of
  // another shape, a parameter without a gradient): the ordinary step from now on, said once.
  void leave_cuda_graphs(const std::string& why);
  // The update at lr with the gradient factor; with SEGTRAIN_CUDA_GRAPH its device work and the
  // gradients' zeroing replay as one graph. Whether the gradients were zeroed.
  bool update_parameters(double lr, double grad_factor);
  void log_step(const StepResult& step);
  // Starts saving `dir` (in the background unless train.save_in_background is
  // false or `wait`); a save in flight is finished first.
  void save(const fs::path& dir, bool with_optimizer_state, bool wait);
  void save_step_checkpoint(bool wait = false) {
    save(run_.dir / "checkpoints" / ("step-" + std::to_string(state_.step)), true, wait);
  }
  int agreed_stop_signal();
  [[noreturn]] void stop_after_step(int signal);
  PerplexityOptions eval_options();
  void build_suites();
  void evaluate_during_training();
  std::vector<double> global_sum(std::vector<double> values);
  void log_optimizer_memory();

  const Config& c_;
  DistributedEnv dist_;
  RunDirectory run_;
  bool writer_;  // rank 0 writes the run directory
  c10::Device device_;
  Precision param_dtype_;  // train.param_dtype, auto decided for device_
  BatchShape batch_;       // train.micro_batch_size and grad_accum for these ranks (size_batch)
  std::optional<MicroBatchChoice> auto_batch_;  // what micro_batch_size auto measured and chose
  std::optional<CheckpointingChoice> auto_checkpointing_;  // what model.activation_checkpointing auto chose
  std::unique_ptr<ProcessGroup> group_;
  data::TokenStore store_;
  std::unique_ptr<EvalSuite> suite_;              // eval.tasks, run by the final evaluation
  std::unique_ptr<EvalSuite> periodic_suite_;     // eval.periodic_tasks, run every train.eval_every steps
  int64_t eval_windows_ = kEvalWindows;           // eval.max_sequences resolved (eval_windows_of)
  std::optional<data::PromptTokenizer> prompts_;  // the store's tokenizer, when a task writes prompts
  std::string store_tokenizer_;  // the store's tokenizer record each checkpoint keeps (empty: it records none)
  // A model converted from a base: checkpoints keep only what trains, and rank 0 writes
  // the base's record (models/spec/base_record.h) beside it.
  bool converted_from_base_ = false;
  std::string base_json_;
  models::ModelConfig model_config_;
  models::TransformerLM model_;
  models::Converters converters_;  // train.freeze: what changes the model before it trains
  std::vector<at::Tensor> params_;  // the trainable ones (models::trainable_parameters)
  std::unique_ptr<FlatBuckets> flat_;  // data parallel: parameters and gradients in flat buckets
  std::unique_ptr<GradientSync> sync_;
  std::unique_ptr<Optimizer> optimizer_;
  // SEGTRAIN_CUDA_GRAPH: the step's two halves as graphs, the micro-batches' tensors they read
  // and the loss sums they write (the whole, and a mixture's by source).
  CudaGraphMode graph_mode_ = CudaGraphMode::off;
  bool graph_automatic_ = false;    // SEGTRAIN_CUDA_GRAPH=auto: falls back rather than stopping
  std::string graphs_off_because_;  // auto: why this run trains the ordinary step
  bool graphs_captured_ = false;    // both halves were captured once: a capture after an evaluation warms up less
  std::unique_ptr<GraphedCall> graphed_forward_backward_, graphed_update_;
  std::vector<MicroBatch> static_micro_;
  at::Tensor static_loss_sum_, static_source_loss_sums_;
  std::vector<std::unique_ptr<CheckpointPart>> checkpoint_parts_;  // what a checkpoint is made of
  OptimizerPart* optimizer_part_ = nullptr;                        // one of them: says whether a resume had its state
  TrainerState state_;
  Clock::time_point started_ = Clock::now();
  int64_t tokens_at_start_ = 0;  // state_.tokens when this process began (after a resume)
  bool resumed_optimizer_state_ = false;  // the checkpoint resumed from had AdamW's state
  std::unique_ptr<data::SourceStores> sources_;  // the stores the loader reads (data.store, or the mixture's)
  std::unique_ptr<data::Loader> loader_;
  TrainingPlan plan_;
  LrSchedule schedule_;
  std::unique_ptr<Cadence> cadence_;
  std::unique_ptr<CheckpointWriter> checkpoints_;
  std::unique_ptr<Metrics> metrics_;
  // Throughput and host waits for collectives since the last logged step.
  Clock::time_point window_start_;
  int64_t window_tokens_ = 0, window_steps_ = 0, window_host_waits_ = 0;
  double window_save_wait_s_ = 0;  // seconds the loop waited for checkpoint saving
  // Runs `what`, counting its time as waiting for checkpoint saving.
  template <class F>
  void waiting_for_saves(F&& what) {
    const auto start = Clock::now();
    what();
    window_save_wait_s_ += std::chrono::duration<double>(Clock::now() - start).count();
  }
};

}  // namespace segtrain::trainer
