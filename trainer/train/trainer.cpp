// The training loop, readable top to bottom: Trainer's constructor sets the run
// up (checkpoint to resume, device, process group, model, optimizer, data,
// budget); train() is the loop; each step fetches the micro-batches, takes the
// masked cross-entropy over the loss tokens of the whole step, clips and
// updates; the Cadence decides when to log, save and evaluate.
#include "trainer/train/trainer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <future>
#include <iomanip>
#include <memory>
#include <optional>
#include <sstream>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/log.h"
#include "common/signals.h"
#include "data/loader.h"
#include "data/prompt_tokenizer.h"
#include "data/token_store.h"
#include "data/tokenizer_identity.h"
#include "models/base_record.h"
#include "models/peft_adapter.h"
#include "models/positions.h"
#include "trainer/eval/eval_outputs.h"
#include "trainer/eval/suite.h"
#include "trainer/eval/perplexity.h"
#include "trainer/eval/stored_model.h"
#include "common/file_io.h"
#include "common/numbers.h"
#include "trainer/config/model_ref.h"
#include "trainer/runtime/device.h"
#include "trainer/runtime/memory.h"
#include "trainer/train/budget.h"
#include "trainer/train/cadence.h"
#include "trainer/train/checkpoint_parts.h"
#include "trainer/train/checkpoint_writer.h"
#include "trainer/train/distributed.h"
#include "trainer/train/flat_buckets.h"
#include "trainer/train/gradient_sync.h"
#include "trainer/train/lr_schedule.h"
#include "trainer/train/metrics.h"
#include "trainer/train/model_setup.h"
#include "trainer/train/optimizer.h"
#include "trainer/train/run_checkpoint.h"
#include "trainer/train/run_directory.h"
#include "trainer/train/sharded_optimizer.h"
#include "trainer/train/step_loss.h"
#include "trainer/train/step_totals.h"

namespace segtrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;

AdamWOptions adamw_options(const Config& c) {
  const TrainConfig& t = c.train;
  AdamWOptions o;
  o.lr = lr_of(c);
  o.beta1 = t.betas[0];
  o.beta2 = t.betas[1];
  o.eps = t.eps;
  o.weight_decay = t.weight_decay;
  o.no_decay = t.no_decay;
  return o;
}

// What one optimizer step measured.
struct StepResult {
  double loss = 0;  // mean over the step's loss tokens, all ranks
  double lr = 0;
  double grad_norm = 0;
  int64_t loss_tokens = 0;
  int stop_signal = 0;  // agreed by all ranks with the step's totals
};

class Trainer {
 public:
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
  void build_model_and_optimizer(const LoadedConfig& loaded);
  void settle_parameter_dtypes();
  void convert_model(const LoadedConfig& loaded, std::future<models::BaseRecord> base_record);
  void assemble_checkpoint_parts();
  void resume_from_checkpoint();
  void plan_steps();
  void set_up_optimizer(const std::vector<std::pair<std::string, at::Tensor>>& named);
  StepResult train_step();
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
  std::unique_ptr<ProcessGroup> group_;
  data::TokenStore store_;
  std::unique_ptr<EvalSuite> suite_;              // eval.tasks, run by the final evaluation
  std::unique_ptr<EvalSuite> periodic_suite_;     // eval.periodic_tasks, run every train.eval_every steps
  int64_t eval_windows_ = kEvalWindows;           // eval.max_sequences resolved (eval_windows_of)
  std::optional<data::PromptTokenizer> prompts_;  // the store's tokenizer, when a task writes prompts
  std::string store_tokenizer_;  // the store's tokenizer record each checkpoint keeps (empty: it records none)
  // A model converted from a base: checkpoints keep only what trains, and rank 0 writes
  // the base's record (models/base_record.h) beside it.
  bool converted_from_base_ = false;
  std::string base_json_;
  models::ModelConfig model_config_;
  models::TransformerLM model_;
  models::Converters converters_;  // train.freeze: what changes the model before it trains
  std::vector<at::Tensor> params_;  // the trainable ones (models::trainable_parameters)
  std::unique_ptr<FlatBuckets> flat_;  // data parallel: parameters and gradients in flat buckets
  std::unique_ptr<GradientSync> sync_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<std::unique_ptr<CheckpointPart>> checkpoint_parts_;  // what a checkpoint is made of
  OptimizerPart* optimizer_part_ = nullptr;                        // one of them: says whether a resume had its state
  TrainerState state_;
  Clock::time_point started_ = Clock::now();
  int64_t tokens_at_start_ = 0;  // state_.tokens when this process began (after a resume)
  bool resumed_optimizer_state_ = false;  // the checkpoint resumed from had AdamW's state
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

Trainer::Trainer(const LoadedConfig& loaded, Resume resume)
    : c_(loaded.config),
      dist_(read_distributed_env()),
      run_(open_run_directory(c_, dist_, resume)),
      writer_(dist_.rank == 0),
      device_(pick_device(c_.run.device, dist_.local_rank)),
      group_(connect(dist_, c_.distributed, device_)),
      store_(data::TokenStore::open(c_.data.store)),
      model_config_(run_model_config(loaded, store_.vocab_size())),
      model_(nullptr) {
  if (group_)
    log::info("rank ", dist_.rank, " of ", dist_.world_size, " connected through ", dist_.master_addr, ":",
              dist_.master_port);
  at::set_num_threads(static_cast<int>(thread_count(c_.run.threads)));
  reset_peak_memory(device_);
  check_inputs(loaded);
  build_model_and_optimizer(loaded);
  resume_from_checkpoint();
  plan_steps();
}

// What would fail only after training is refused now (exit 2): a store in another
// tokenizer than the base's, an empty evaluation split, a store that cannot write
// passkey prompts, evaluation lengths past a learned table.
void Trainer::check_inputs(const LoadedConfig& loaded) {
  // The store's ids must mean the base's tokens; checkpoints keep which tokenizer the model learns.
  if (const std::string base = model_ref_dir(c_.model.init); !base.empty())
    check_store_tokenizer(c_.data.store, base, loaded.locate("data.store"), "data.allow_tokenizer_mismatch: true",
                          c_.data.allow_tokenizer_mismatch);
  if (const auto identity = data::store_tokenizer_identity(c_.data.store))
    store_tokenizer_ = data::identity_to_json(*identity, absolute_folder(c_.data.store));  // read from any directory
  // The final evaluation reads eval.split: an empty one would end the run with ppl nan.
  if (store_.split(data::parse_split(c_.eval.split)).documents() == 0)
    throw InputError(loaded.locate("eval.split") + ": the store '" + c_.data.store + "' has no " + c_.eval.split +
                     " documents (prepare it with a larger --valid-fraction, or set eval.split: train)");
  // The store's own tokenizer writes the tasks' prompts: a store without one, or a length too short for a
  // prompt, is refused now, not after training.
  eval_windows_ = c_.eval.max_sequences.value_or(kEvalWindows);  // auto from a base: resolved with the plan
  build_suites();
  prompts_ = suite_->open_prompts(c_.data.store, store_.split(data::parse_split(c_.eval.split)), loaded.locate("eval.tasks"));
  // A learned table has no rows past its end: say so now, not after training.
  if (models::position_scheme(model_config_.arch) == models::PositionScheme::learned)
    for (const auto& task : suite_->tasks())
      if (task->longest() > models::ape_rows(model_config_))
        throw InputError(loaded.locate(task->lengths_key()) +
                         ": length " + std::to_string(task->longest()) + " is longer than the model's " +
                         std::to_string(models::ape_rows(model_config_)) +
                         " positions; evaluate an extended model (model.extension.method: interpolate) or drop it");
}

// The model, converted, on its device, every rank from rank 0's weights; its
// optimizer over the parameters that train; the parts its checkpoints are made of.
void Trainer::build_model_and_optimizer(const LoadedConfig& loaded) {
  const auto started = Clock::now();
  // A converted run records its base (rank 0): hashed while the weights load, so the files
  // come from disk once (the hash reads ahead of the loader) and the two overlap.
  std::future<models::BaseRecord> base_record;
  if (const std::string base = model_ref_dir(c_.model.init); writer_ && !base.empty() && !model_converters(c_).empty())
    base_record = std::async(std::launch::async, [base] { return models::record_base(base); });
  model_ = build_model(loaded, model_config_);
  convert_model(loaded, std::move(base_record));
  if (!model_ref_dir(c_.model.init).empty())
    log::info("base loaded and converted in ", std::fixed, std::setprecision(1),
              std::chrono::duration<double>(Clock::now() - started).count(), " s, peak host memory ",
              peak_memory(device_).rss_mb, " MiB", std::defaultfloat);
  model_->to(device_);
  model_->train();
  const auto named = models::trainable_parameters(model_);
  for (const auto& [name, p] : named) params_.push_back(p);
  if (group_) {  // every rank starts from rank 0's weights, frozen ones included
    std::vector<at::Tensor> data;
    for (const auto& p : model_->parameters()) data.push_back(p.detach());
    group_->broadcast(data);
  }
  set_up_optimizer(named);
  log_optimizer_memory();
  state_.world_size = dist_.world_size;
  assemble_checkpoint_parts();
}

// A base loads in the dtype stored (model_setup.h). What trains is fp32 (master weights);
// the frozen weights of a run converted from a base are the base's, which its checkpoints
// do not keep: with bf16 parameters they are held in bf16 (a bf16 base is never expanded),
// else in fp32. One tensor at a time, so the host never holds the base twice.
void Trainer::settle_parameter_dtypes() {
  torch::NoGradGuard no_grad;
  const bool bf16_base = c_.train.param_dtype == Precision::bf16 && converted_from_base_;
  for (auto& p : model_->parameters()) {
    const auto dtype = !p.requires_grad() && bf16_base ? at::kBFloat16 : at::kFloat;
    if (p.scalar_type() != dtype) p.set_data(p.detach().to(dtype));
  }
}

// The model converters of the run's config (models/converters/), applied before
// the model goes to its device; a pattern that does not fit this model is the
// config's error (exit 2), named by its key.
void Trainer::convert_model(const LoadedConfig& loaded, std::future<models::BaseRecord> base_record) {
  converters_ = model_converters(c_);
  for (const auto& converter : converters_) {
    try {
      converter->convert(model_);
    } catch (const InputError& e) {
      throw InputError(loaded.locate(converter->config_key()) + ": " + e.what());
    }
  }
  converted_from_base_ = !converters_.empty() && !model_ref_dir(c_.model.init).empty();
  settle_parameter_dtypes();  // before an adapter's fp32 weights are copied in
  // A PEFT adapter continued: its weights over the converted model's (a resumed run's checkpoint
  // then replaces what trains).
  if (const auto ref = parse_model_ref(c_.model.init); ref && ref->kind == ModelRef::Kind::peft) {
    try {
      const int64_t tensors = models::load_peft_adapter(model_, ref->adapter);
      log::info("continuing the PEFT adapter ", ref->adapter, " (", tensors, " tensors) on its base ", ref->dir);
      // A PEFT folder records weights, not where its run stopped reading: the sampler starts over
      // (a resumed run's checkpoint restores its own position).
      if (!run_.resume_from)
        log::warn("the data starts at its beginning: a PEFT adapter records no data position, so a run on the "
                  "data and run.seed that trained it sees the same samples again (another run.seed draws others)");
    } catch (const InputError& e) {
      throw InputError(loaded.locate("model.init") + ": " + e.what());
    }
  }
  if (converters_.empty()) return;
  if (base_record.valid()) {  // the record is rank 0's to write: the base is read once
    const models::BaseRecord record = base_record.get();
    base_json_ = models::base_record_to_json(record);
    log::info("checkpoints keep only what trains, on the base ", record.folder, " (", record.files.size(),
              " files, ", record.bytes() >> 20, " MiB, recorded)");
  }
  int64_t trainable = 0, total = 0;
  for (const auto& p : model_->parameters()) {
    total += p.numel();
    if (p.requires_grad()) trainable += p.numel();
  }
  std::string names;
  for (const auto& converter : converters_) names += (names.empty() ? "" : ", ") + converter->name();
  log::info("model converted (", names, "): ", trainable, " of ", total, " parameters train (", std::fixed, std::setprecision(2),
            100.0 * static_cast<double>(trainable) / static_cast<double>(std::max<int64_t>(total, 1)), "%)",
            std::defaultfloat);
}

void Trainer::assemble_checkpoint_parts() {
  checkpoint_parts_.push_back(std::make_unique<ModelPart>(model_, *optimizer_, base_json_));
  auto optimizer = std::make_unique<OptimizerPart>(*optimizer_);
  optimizer_part_ = optimizer.get();
  checkpoint_parts_.push_back(std::move(optimizer));
  checkpoint_parts_.push_back(std::make_unique<TrainerStatePart>(state_));
  checkpoint_parts_.push_back(std::make_unique<RunRecordPart>(to_yaml(c_), store_tokenizer_));
  checkpoint_parts_.push_back(std::make_unique<ConvertersPart>(converters_));
}

void Trainer::resume_from_checkpoint() {
  if (run_.resume_from) {
    for (const auto& part : checkpoint_parts_) part->load(run_.resume_from->dir);
    resumed_optimizer_state_ = optimizer_part_->loaded_state();
    // The counters and cursor go on; the ranks are this run's (a checkpoint of another world size
    // with the same global batch continues here, and its next one records these ranks).
    state_.world_size = dist_.world_size;
    tokens_at_start_ = state_.tokens;
    log::info("resuming from ", run_.resume_from->dir.string(), " at step ", state_.step);
  }
  if (group_) {
    // Each rank chose its checkpoint before connecting; on nodes with their own
    // launchers one may have looked while rank 0 still wrote a newer one. All
    // ranks must start from the same step (equal sum and sum of squares).
    const auto step = static_cast<double>(state_.step);
    const auto sums = global_sum({step, step * step});
    const auto world = static_cast<double>(dist_.world_size);
    if (sums[0] != world * step || sums[1] != world * step * step)
      throw std::runtime_error("rank " + std::to_string(dist_.rank) + " resumes at step " + std::to_string(state_.step) +
                       " but the ranks do not all start from the same checkpoint (mean step " +
                       std::to_string(sums[0] / world) + "); run.output_dir must be one shared directory: restart");
  }
}

// The loader from the run's cursor, the step plan, the schedule and cadence; config.yaml resolved.
void Trainer::plan_steps() {
  data::LoaderOptions loader_options;
  loader_options.seed = static_cast<uint64_t>(c_.run.seed);
  loader_options.rank = dist_.rank;
  loader_options.world_size = dist_.world_size;
  loader_options.micro_batch_size = c_.train.micro_batch_size;
  loader_options.start = state_.cursor;
  loader_options.threads = 1;
  loader_ = std::make_unique<data::Loader>(store_, c_.data, loader_options);
  plan_ = plan_training(c_, loader_->samples_per_epoch(), loader_->sample_length(), dist_.world_size);
  state_.total_steps = plan_.total_steps;
  if (run_.resume_from && !resumed_optimizer_state_ && state_.step < plan_.total_steps)
    throw InputError("--resume: " + run_.resume_from->dir.string() + " has no optimizer state (final/ keeps it only "
                     "with train.final_optimizer_state: true), so this run cannot train on from step " +
                     std::to_string(state_.step) + "; start a new run from it with model.init: checkpoint:" +
                     run_.resume_from->dir.string());
  // eval.max_sequences auto from a pretrained base follows the run's size: the suite, built before
  // the plan to check the prompts, is built again with it.
  if (const int64_t windows = eval_windows_of(c_, plan_.total_steps * plan_.tokens_per_step); windows != eval_windows_) {
    eval_windows_ = windows;
    build_suites();
  }
  const int64_t warmup = warmup_steps_of(c_, plan_.total_steps);
  schedule_ = LrSchedule{c_.train.schedule, lr_of(c_), min_lr_of(c_), warmup, plan_.total_steps};
  // A warm-up longer than a quarter of the run keeps the lr far below train.lr for much of it:
  // said at once, not found in metrics.jsonl afterwards (auto never asks for that).
  if (dist_.rank == 0 && warmup * 4 > plan_.total_steps) {
    std::ostringstream peak;
    peak << std::fixed << std::setprecision(1) << 100.0 * schedule_.at(plan_.total_steps - 1) / lr_of(c_);
    log::warn("train.warmup_steps ", warmup, " is over a quarter of this run's ", plan_.total_steps,
              " steps", warmup > plan_.total_steps ? ": the lr never reaches train.lr (its last step "
                                                     "takes " + peak.str() + "% of it)"
                                                   : "",
              "; set train.warmup_steps to a few percent of the steps, or leave it out (auto)");
  }
  cadence_ = std::make_unique<Cadence>(c_.train, plan_.total_steps, state_.step);
  checkpoints_ = std::make_unique<CheckpointWriter>(
      dist_.rank, dist_.world_size, [this](std::vector<double> v) { return global_sum(std::move(v)); }, run_.dir,
      c_.train.keep_last, std::chrono::seconds(c_.distributed.save_timeout_s));

  Config resolved = c_;
  resolved.model.spec = model_config_;
  // What the run read, as folders that mean the same from any working directory (generate,
  // eval and export follow them from its config.yaml).
  resolved.data.store = absolute_folder(c_.data.store);
  resolved.model.init = with_absolute_folder(c_.model.init);
  if (writer_) write_file_atomic(run_.dir / "config.yaml", to_yaml(resolved));
  log::info("run ", c_.run.name, ": ", data::describe(loader_->windows().stats, c_.data.extended_length));
  log::info("plan: ", plan_.total_steps, " steps of ", plan_.global_batch, " x ", plan_.sample_length, " tokens = ",
            plan_.total_steps * plan_.tokens_per_step, " tokens (", std::setprecision(3), plan_.epochs, " epochs of ",
            plan_.samples_per_epoch, " windows); model ", model_config_.d_model, "x", model_config_.n_layers, " ",
            enum_name(models::kArchs, model_config_.arch), " on ", device_.str(), ", ", at::get_num_threads(),
            " threads; lr ", format_double(lr_of(c_)), " after ", warmup_steps_of(c_, plan_.total_steps),
            " warm-up steps", c_.train.lr ? "" : from_pretrained(c_) ? " (auto: a pretrained base's)" : " (auto)");
  metrics_ = std::make_unique<Metrics>(writer_ ? run_.dir : fs::path(), c_.train.tensorboard, state_.step,
                                       plan_.total_steps);
}

// Data parallel, or with bf16 parameters, the parameters live in flat buckets
// (flat_buckets.h); GradientSync sums (sharded: reduce-scatters) their
// gradients over ranks while backward runs. bf16 parameters take their fp32
// master weights from the values they are rounded from.
void Trainer::set_up_optimizer(const std::vector<std::pair<std::string, at::Tensor>>& named) {
  const bool bf16 = c_.train.param_dtype == Precision::bf16;
  const bool shard = group_ && c_.distributed.shard_optimizer;
  // The master weights' source. On a GPU a host copy, so each parameter's fp32
  // storage on the device is freed as soon as its bucket holds its bf16 value:
  // the device never holds fp32 parameters, bf16 buckets and master slices at
  // once (4 bytes a parameter of host memory for a moment instead; 8 + 16/N
  // bytes a parameter on the device if it stayed there). On the CPU it shares
  // the parameters' storage until the master copies exist.
  std::map<std::string, at::Tensor> fp32_values;
  if (bf16)
    for (const auto& [name, p] : named) fp32_values[name] = p.device().is_cpu() ? p.detach() : p.detach().to(at::kCPU);
  if (group_ || bf16)
    flat_ = std::make_unique<FlatBuckets>(params_, static_cast<int64_t>(c_.distributed.bucket_mb * (1 << 20)),
                                          dist_.world_size,
                                          bf16 ? std::optional(at::kBFloat16) : std::nullopt);
  if (bf16 || shard) {
    optimizer_ = std::make_unique<ShardedAdamW>(named, adamw_options(c_), *flat_,
                                                ShardedAdamWSetup{group_.get(), shard, std::move(fp32_values)});
  } else {
    optimizer_ = std::make_unique<FusedAdamW>(named, adamw_options(c_), flat_.get());
  }
  if (!group_) return;
  GradientSyncOptions sync{shard ? Reduction::reduce_scatter : Reduction::all_reduce, std::nullopt, {}};
  if (optimizer_->keeps_master_weights()) {
    sync.reduce_dtype = c_.train.reduce_dtype == Precision::bf16 ? at::kBFloat16 : at::kFloat;
    sync.sink = [this](size_t bucket, FlatRange range, const at::Tensor& reduced) {
      optimizer_->accumulate(bucket, range, reduced);
    };
  }
  sync_ = std::make_unique<GradientSync>(*group_, *flat_, std::move(sync));
}

void Trainer::train() {
  window_start_ = Clock::now();
  Clock::time_point counted_until = window_start_;
  while (!cadence_->finished(state_.step)) {
    const StepResult step = train_step();
    // Counted before this step's checkpoint is taken, so that the checkpoint's figure
    // covers everything up to it; the saving and evaluating after a step count in the next.
    const Clock::time_point now = Clock::now();
    if (state_.train_seconds) *state_.train_seconds += std::chrono::duration<double>(now - counted_until).count();
    counted_until = now;
    if (cadence_->should_log(state_.step)) log_step(step);
    // A signal during the last step lets the run finish: final/ is saved, then it exits 128 + signal.
    if (step.stop_signal && !cadence_->finished(state_.step)) stop_after_step(step.stop_signal);
    if (cadence_->should_checkpoint(state_.step)) waiting_for_saves([&] { save_step_checkpoint(); });
    if (cadence_->should_evaluate(state_.step)) evaluate_during_training();
  }
  metrics_->newline();
}

// The loss is the mean over the loss tokens of the whole step (all
// micro-batches, all ranks). Backward runs on the summed loss, and the
// gradient is divided by the step's count afterwards, together with the
// clipping: the count over all ranks then joins the step's one reduction
// (step_totals.h) instead of needing a round trip of its own before backward.
StepResult Trainer::train_step() {
  const int64_t waits_before = group_ ? group_->host_waits() : 0;
  StepResult result;
  result.lr = schedule_.at(state_.step);
  std::vector<MicroBatch> micro;
  data::Cursor cursor_after;
  int64_t loss_tokens = 0;
  for (int64_t k = 0; k < c_.train.grad_accum; ++k) {
    data::Batch batch = loader_->next();
    cursor_after = batch.cursor;
    micro.push_back(to_tensors(batch, device_));
    loss_tokens += micro.back().loss_tokens;
  }
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device_));
  const bool master = optimizer_->keeps_master_weights();
  for (size_t k = 0; k < micro.size(); ++k) {
    at::Tensor loss;
    {
      Autocast autocast(c_.train.precision == Precision::bf16, device_.type());
      loss = micro_batch_loss(model_, micro[k], c_.train.loss_chunk_tokens);
    }
    // The last micro-batch's backward reduces over ranks; with master weights
    // every one's does, into the optimizer's fp32 sums.
    if (sync_ && (master || k + 1 == micro.size())) sync_->arm();
    loss.backward();
    loss_sum += loss.detach().to(at::kDouble);
    if (master) {
      if (sync_) sync_->finish();
      else optimizer_->accumulate_local();
      flat_->zero_grad();
    }
  }
  if (sync_ && !master) sync_->finish();
  // Unsharded, every rank holds the whole reduced gradient: rank 0 counts it.
  const bool counts_norm = optimizer_->sharded() || dist_.rank == 0;
  const StepTotals totals = reduce_step_totals(
      group_.get(),
      {stop_signal(), loss_tokens, loss_sum,
       counts_norm ? optimizer_->grad_square_sum() : at::zeros({}, loss_sum.options()), checkpoints_->part()},
      device_);
  waiting_for_saves([&] { checkpoints_->settle(totals.saves_written, totals.saves_failed); });  // a save in flight
  result.stop_signal = totals.stop_signal;
  result.loss_tokens = totals.loss_tokens;
  const double denominator = static_cast<double>(std::max<int64_t>(totals.loss_tokens, 1));
  result.loss = totals.loss_sum / denominator;
  const double grad_norm = std::sqrt(totals.grad_square_sum) / denominator;
  state_.cursor = cursor_after;
  state_.tokens += plan_.tokens_per_step;
  state_.loss_tokens += result.loss_tokens;

  // A non-finite loss or gradient never reaches the weights; a step without
  // loss tokens (possible with prefix) has nothing to learn from.
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
      optimizer_->scale_grads(clip_factor(grad_norm, c_.train.grad_clip) / denominator);
      optimizer_->step(result.lr);
    }
  }
  optimizer_->zero_grad();
  ++state_.step;
  window_tokens_ += plan_.tokens_per_step;
  ++window_steps_;
  if (group_) window_host_waits_ += group_->host_waits() - waits_before;
  return result;
}

void Trainer::log_step(const StepResult& step) {
  const double seconds = std::chrono::duration<double>(Clock::now() - window_start_).count();
  const double seconds_per_step = seconds / static_cast<double>(std::max<int64_t>(window_steps_, 1));
  nlohmann::json row = {{"step", state_.step},
                       {"tokens", state_.tokens},
                       {"loss", step.loss},
                       {"lr", step.lr},
                       {"grad_norm", step.grad_norm},
                       {"tokens_per_s", static_cast<double>(window_tokens_) / std::max(seconds, 1e-9)},
                       {"loss_tokens", step.loss_tokens},
                       {"skipped_steps", state_.skipped_steps},
                       {"optimizer_state_mb", std::round(static_cast<double>(optimizer_->state_bytes()) / (1 << 20) * 1000) / 1000},
                       // Seconds of these steps the loop waited for checkpoint saving (the part a
                       // background save does not hide: its start, the host copy, the commit).
                       {"checkpoint_wait_s", std::round(window_save_wait_s_ * 1000) / 1000}};
  // Blocking reductions of host values a step: 1 (its totals), whatever the world size
  // (on Gloo the gradient collectives block the host too; not counted here).
  if (group_)
    row["host_waits_per_step"] =
        static_cast<double>(window_host_waits_) / static_cast<double>(std::max<int64_t>(window_steps_, 1));
  row.update(peak_memory_json(peak_memory(device_)));
  metrics_->record(row, seconds_per_step * static_cast<double>(plan_.total_steps - state_.step));
  window_start_ = Clock::now();
  window_tokens_ = window_steps_ = window_host_waits_ = 0;
  window_save_wait_s_ = 0;
}

// Every rank saves its share of each checkpoint part (checkpoint_parts.h); master weights held in
// bf16 are gathered to rank 0 first, by every rank, as the model file is fp32.
void Trainer::save(const fs::path& dir, bool with_optimizer_state, bool wait) {
  try {
    checkpoints_->finish();  // one save in flight at most
  } catch (const Interrupted&) {
    throw;
  } catch (const std::runtime_error& e) {
    // Agreed by every rank. A periodic save ends the run with it; a stop or the
    // end of the run still saves the state it has, which the failed one is older than.
    if (!wait) throw;
    log::error(e.what());
  }
  CheckpointContent content;
  const SaveRequest request{dist_.rank, dist_.world_size, with_optimizer_state};
  for (const auto& part : checkpoint_parts_)
    if (auto saved = part->save(request)) content.push_back(std::move(saved));
  if (writer_) checkpoints_->prepare(dir);
  if (group_) group_->barrier();  // the shared directory exists before any rank writes into it
  const bool background = c_.train.save_in_background && !wait;
  checkpoints_->start(dir, std::move(content), background);
  if (!background) checkpoints_->finish();
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

// Evaluation checks for a stop between batches, agreed by all ranks like a step's.
PerplexityOptions Trainer::eval_options() {
  PerplexityOptions options = perplexity_options(c_.eval, c_.train.loss_chunk_tokens);
  options.max_sequences = eval_windows_;
  options.check_stop = [this] {
    if (const int signal = agreed_stop_signal()) throw Interrupted(signal);
  };
  return options;
}

// The final evaluation's suite (eval.tasks) and the periodic one (eval.periodic_tasks, auto: the
// same tasks), with the run's windows and seed.
void Trainer::build_suites() {
  const auto seed = static_cast<uint64_t>(c_.run.seed);
  suite_ = std::make_unique<EvalSuite>(c_.eval, c_.eval.lengths, eval_options(), c_.eval.split, seed);
  EvalConfig periodic = c_.eval;
  if (!c_.eval.periodic_tasks.empty()) periodic.tasks = c_.eval.periodic_tasks;
  periodic_suite_ = std::make_unique<EvalSuite>(periodic, c_.eval.lengths, eval_options(), c_.eval.split, seed);
}

// Every rank runs every periodic task (perplexity's windows are split between them; a prompt
// task on rank 0 alone would leave the others waiting for the next step's collectives); rank 0
// logs the figures and writes them to TensorBoard.
void Trainer::evaluate_during_training() {
  metrics_->newline();
  std::string names;
  for (const auto& task : periodic_suite_->tasks()) names += (names.empty() ? "" : ", ") + task->name();
  log::info("step ", state_.step, ": evaluating ", names, " on ", c_.eval.split);
  try {
    const Autocast autocast(evaluates_in_bf16(c_.eval, c_.train.precision), device_.type());
    const TaskData data{&store_.split(data::parse_split(c_.eval.split)), prompts_ ? &*prompts_ : nullptr};
    SuiteRun how;
    how.log = writer_;
    how.on_result = [this](const EvalTask& task, const std::vector<TaskResult>& results) {
      metrics_->eval_scalars(task.scalars(results.back()), state_.step);
    };
    run_suite(*periodic_suite_, model_, data, how);
  } catch (const Interrupted& stop) {
    save_step_checkpoint(/*wait=*/true);  // every rank was told during the evaluation: keep this step's state
    log::warn("signal ", stop.signal, " during evaluation: saved step ", state_.step, "; continue with --resume");
    throw;
  }
}

void Trainer::save_final() {
  // Evaluating and exporting need the model alone; AdamW's moments are twice its size.
  save(run_.dir / "final", c_.train.final_optimizer_state, /*wait=*/true);
  if (dist_.world_size > 1 || c_.run.log_all_ranks) {
    double checksum = 0;
    for (const auto& p : model_->parameters()) checksum += p.detach().to(at::kDouble).sum().item<double>();
    log::info("rank ", dist_.rank, " final parameter checksum ", std::setprecision(17), checksum);
  }
  log::info("trained ", state_.step, " steps, ", state_.tokens, " tokens (", state_.loss_tokens, " in the loss, ",
            state_.skipped_steps, " steps skipped); saved ", (run_.dir / "final").string());
}

// Perplexity runs on every rank (its windows are split between them and its stop
// checks are collective), then rank 0 alone runs the prompt tasks; each task's
// figures are written as they come, so a later task that fails keeps them.
// A task that eval.json already holds for this step, precision and settings (a `--resume` of a
// trained run, or of one whose evaluation was stopped) is kept, not measured again; rank 0
// decides, as only it reads eval.json.
void Trainer::evaluate_final() {
  const bool bf16 = evaluates_in_bf16(c_.eval, c_.train.precision);
  const Autocast autocast(bf16, device_.type());
  const TaskData data{&store_.split(data::parse_split(c_.eval.split)), prompts_ ? &*prompts_ : nullptr};
  const EvalOutputs outputs = run_eval_outputs(run_.dir, c_.eval.per_position, c_.data.train_length);
  EvalRecord record;
  record.evaluated = {{"step", state_.step}, {"precision", bf16 ? "bf16" : "fp32"}, {"tasks", nlohmann::json::object()}};
  for (const auto& task : suite_->tasks()) record.evaluated["tasks"][task->name()] = task->settings();
  std::vector<std::string> held;
  if (writer_ && fs::exists(outputs.json)) {
    try {
      record.prior = nlohmann::json::parse(read_file(outputs.json, "eval.json"));
      held = tasks_already_evaluated(record.prior, record.evaluated);
    } catch (const std::exception& e) {
      log::warn(outputs.json.string(), " is not readable (", e.what(), "): every task is evaluated again");
    }
  }
  SuiteRun how;
  how.log = writer_;
  how.skip = [&](const EvalTask& task) {
    if (task.writes_prompts() && !writer_) return true;
    bool holds = std::find(held.begin(), held.end(), task.name()) != held.end();
    if (!task.writes_prompts()) holds = global_sum({holds ? 1.0 : 0.0})[0] > 0;  // every rank runs it
    if (holds) {
      record.kept.push_back(task.name());
      log::info("eval: ", task.name(), ": ", outputs.json.string(), " holds it for step ", state_.step,
                " with these settings; not evaluated again");
    }
    return holds;
  };
  how.on_result = [&](const EvalTask& task, const std::vector<TaskResult>& results) {
    // The task checks for a stop before each batch (prompt), none after its last: a signal during
    // that one (the whole task, when it is one batch) stops the evaluation before its figures count.
    // Perplexity runs on every rank (an agreed stop), a prompt task on rank 0 alone.
    if (const int signal = task.writes_prompts() ? stop_signal() : agreed_stop_signal()) throw Interrupted(signal);
    metrics_->eval_scalars(task.scalars(results.back()), state_.step);
    if (writer_) write_eval_outputs(outputs, c_.run.name, results, EvalDevice{device_, peak_memory(device_)}, record);
  };
  run_suite(*suite_, model_, data, how);
}

// What the final evaluation will read, beside the plan: a run of a minute should not end in an hour
// of evaluation that nothing announced.
void Trainer::log_final_evaluation_plan() const {
  if (!writer_) return;
  const auto& split = store_.split(data::parse_split(c_.eval.split));
  PerplexityOptions options = perplexity_options(c_.eval, c_.train.loss_chunk_tokens);
  options.max_sequences = eval_windows_;
  std::string lengths;
  int64_t tokens = 0;
  for (const int64_t length : c_.eval.lengths) {
    const int64_t windows = perplexity_windows(split, length, options);
    tokens += windows * length;
    lengths += (lengths.empty() ? "" : ", ") + std::to_string(length) + " (" + std::to_string(windows) + " windows)";
  }
  std::string tasks;
  for (const auto& task : suite_->tasks())
    if (task->writes_prompts()) tasks += ", " + task->name();
  const double train_tokens = static_cast<double>(plan_.total_steps * plan_.tokens_per_step);
  std::ostringstream share;
  share << std::fixed << std::setprecision(1) << 100.0 * static_cast<double>(tokens) / std::max(train_tokens, 1.0);
  log::info("final evaluation: perplexity at L = ", lengths, ": ", tokens, " tokens through the model (", share.str(),
            "% of the training's, forward only)", tasks, "; eval.lengths and eval.max_sequences size it",
            c_.eval.max_sequences || !from_pretrained(c_)
                ? ""
                : " (auto from a pretrained base: " + std::to_string(eval_windows_) +
                      " windows a length, near a quarter of the training's tokens, at least 4)");
}

void Trainer::log_evaluation_stopped(int signal) const {
  if (!writer_) return;
  auto joined = [](const auto& values) {
    std::ostringstream out;
    for (size_t i = 0; i < values.size(); ++i) out << (i ? "," : "") << values[i];
    return out.str();
  };
  log::warn("signal ", signal, " stopped the final evaluation; the training is complete (", state_.step,
            " steps, model ", (run_.dir / "final").string(), "); evaluate it with: segtrain eval --model ",
            run_.dir.string(), " --data ", absolute_folder(c_.data.store), " --split ", c_.eval.split,
            " --lengths ", joined(c_.eval.lengths), " --max-sequences ", eval_windows_, " --tasks ",
            joined(c_.eval.tasks), " --out ", (run_.dir / "eval.json").string());
}

// What a user reads last: how long it took, where everything is, what to do next.
void Trainer::log_summary(bool evaluated) const {
  if (!writer_) return;
  const double seconds = std::chrono::duration<double>(Clock::now() - started_).count();
  const auto tokens = static_cast<double>(state_.tokens - tokens_at_start_);
  std::ostringstream rate;
  rate << std::fixed << std::setprecision(0) << tokens / std::max(seconds, 1e-9);
  // state_.tokens counts every rank's tokens: the rate is the run's, not this process's.
  const std::string ranks = dist_.world_size > 1 ? ", " + std::to_string(dist_.world_size) + " ranks together" : "";
  log::info("done in ", format_duration(seconds), " (", rate.str(), " tok/s over the ",
            state_.tokens - tokens_at_start_, " tokens trained in this session", ranks, "): model ",
            (run_.dir / "final").string(),
            evaluated ? ", perplexity " + (run_.dir / "eval.json").string() : std::string(), ", metrics ",
            (run_.dir / "metrics.jsonl").string());
  if (!evaluated) return;  // a grid's row: the grid goes on
  log::info("next: segtrain export --model ", run_.dir.string(), " --out ", run_.dir.string(), "-hf",
            "   (a folder transformers loads)");
}

// AdamW's moments on this rank: with distributed.shard_optimizer about 1/N of
// the whole (also in metrics.jsonl as optimizer_state_mb).
void Trainer::log_optimizer_memory() {
  const double mib = static_cast<double>(optimizer_->state_bytes()) / (1 << 20);
  const bool sharded = group_ && c_.distributed.shard_optimizer;
  log::info("rank ", dist_.rank, ": optimizer state ", std::fixed, std::setprecision(1), mib, " MiB",
            sharded ? " (sharded over " + std::to_string(dist_.world_size) + " ranks)" : std::string(),
            std::defaultfloat);
  if (c_.distributed.shard_optimizer && !group_)
    log::info("distributed.shard_optimizer: one rank holds the whole state; nothing to shard");
}

// Sums over ranks (identity for one process), so every rank takes the same decisions.
std::vector<double> Trainer::global_sum(std::vector<double> values) {
  if (!group_) return values;
  std::vector<at::Tensor> t{at::tensor(values, at::kDouble)};
  group_->all_reduce_sum(t);
  return std::vector<double>(t[0].data_ptr<double>(), t[0].data_ptr<double>() + values.size());
}

}  // namespace

int run_training(const LoadedConfig& loaded, Resume resume, bool final_eval) {
  throw_if_stopped();  // a signal while the command read its config: nothing to save yet
  Trainer trainer(loaded, resume);
  if (final_eval) trainer.log_final_evaluation_plan();
  try {
    trainer.train();
    trainer.save_final();
  } catch (const Interrupted&) {
    trainer.shut_down_group();  // every rank stopped at the same point: not a failure
    throw;
  }
  try {
    if (final_eval) trainer.evaluate_final();
  } catch (const Interrupted& stop) {
    // The training is done and saved: a stop during its evaluation ends the evaluation (within a
    // batch of windows), and the run is reported as trained, not as interrupted.
    trainer.shut_down_group();
    trainer.log_evaluation_stopped(stop.signal);
    return 128 + stop.signal;
  }
  trainer.log_summary(final_eval);
  trainer.shut_down_group();
  // Everything is done and written: a signal that came after the last check stops nothing.
  if (const int signal = stop_signal()) log::info("signal ", signal, " came after the run completed: nothing to stop");
  return 0;
}

}  // namespace segtrain::trainer
