// The Trainer's set-up (trainer_class.h), in the order the constructor runs it: the inputs
// checked before anything heavy, the model built and converted (a PEFT adapter loaded), the
// parameters' dtypes, the optimizer and its gradient sync, a checkpoint resumed, then the plan
// of steps with the loader, schedule, cadence and the run's config.yaml.
#include <algorithm>
#include <chrono>
#include <future>
#include <iomanip>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/log.h"
#include "common/numbers.h"
#include "data/sampler_kind.h"
#include "data/tokenizer_identity.h"
#include "kernels/fused_kernels.h"
#include "models/modules/peft_adapter.h"
#include "models/modules/positions.h"
#include "models/spec/base_record.h"
#include "trainer/config/model_ref.h"
#include "trainer/eval/stored_model.h"
#include "trainer/runtime/cpu_matmul.h"
#include "trainer/runtime/device.h"
#include "trainer/runtime/memory.h"
#include "trainer/train/model_setup.h"
#include "trainer/train/sharded_optimizer.h"
#include "trainer/train/trainer_class.h"

namespace segtrain::trainer {
namespace {

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

}  // namespace

Trainer::Trainer(const LoadedConfig& loaded, Resume resume)
    : c_(loaded.config),
      dist_(read_distributed_env()),
      run_(open_run_directory(c_, dist_, resume)),
      writer_(dist_.rank == 0),
      device_(pick_device(c_.run.device, dist_.local_rank)),
      param_dtype_(param_dtype_of(c_, device_.is_cuda())),
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
  settle_cpu_matmul();
  size_batch();
  plan_steps();
}

// What would fail only after training is refused now (exit 2): a store in another
// tokenizer than the base's, an empty evaluation split, a store that cannot write
// passkey prompts, evaluation lengths past a learned table, a captured step
// (SEGTRAIN_CUDA_GRAPH) this run cannot take.
void Trainer::check_inputs(const LoadedConfig& loaded) {
  const CudaGraphRequest graphs = cuda_graph_requested();
  graph_mode_ = graphs.mode;
  graph_automatic_ = graphs.automatic;
  if (graph_mode_ != CudaGraphMode::off)
    if (const std::string why = cuda_graph_refusal(); !why.empty()) {
      if (!graph_automatic_)
        throw InputError("SEGTRAIN_CUDA_GRAPH=" + std::string(graph_mode_ == CudaGraphMode::captured ? "1" : "static") +
                         ": this run's step cannot be captured: " + why + "; unset SEGTRAIN_CUDA_GRAPH to train it");
      graph_mode_ = CudaGraphMode::off;  // auto: the ordinary step, the plan line says why
      graphs_off_because_ = why;
    }
  // The store's ids must mean the base's tokens; checkpoints keep which tokenizer the model learns.
  if (const std::string base = model_ref_dir(c_.model.init); !base.empty())
    check_store_tokenizer(c_.data.store, base, loaded.locate("data.store"), "data.allow_tokenizer_mismatch: true",
                          c_.data.allow_tokenizer_mismatch);
  const auto identity = data::store_tokenizer_identity(c_.data.store);
  if (identity) store_tokenizer_ = data::identity_to_json(*identity, absolute_folder(c_.data.store));  // read from any directory
  check_source_tokenizers(loaded, identity);
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

// A mixture's stores must give ids the model reads as data.store's do: each is checked against
// the base (as data.store is), and against data.store's own tokenizer (which a scratch model learns).
void Trainer::check_source_tokenizers(const LoadedConfig& loaded,
                                      const std::optional<data::TokenizerIdentity>& store_identity) {
  const auto& d = c_.data;
  const auto sources = data::data_sources(d);
  for (std::size_t i = 0; i < d.mixture.size(); ++i) {
    const std::string& store = sources[i].data.store;
    if (store == d.store) continue;  // data.store is checked above, and against the model's size by its resolution
    const std::string key = data::source_key(d, i) + ".store";
    const std::string where = loaded.origin("data.mixture") + ": " + key;
    // Ids past the model's table cannot be read whatever data.allow_tokenizer_mismatch says.
    const int64_t vocab = data::TokenStore::open(store).vocab_size();
    if (model_config_.vocab_size && vocab > *model_config_.vocab_size)
      throw InputError(where + ": the store '" + store + "' has a vocabulary of " + std::to_string(vocab) +
                       " tokens, past the model's " + std::to_string(*model_config_.vocab_size) +
                       "; prepare it with the model's tokenizer");
    if (const std::string base = model_ref_dir(c_.model.init); !base.empty())
      check_store_tokenizer(store, base, where, "data.allow_tokenizer_mismatch: true", d.allow_tokenizer_mismatch);
    const auto identity = data::store_tokenizer_identity(store);
    if (!store_identity || !identity) continue;  // a store that records none: check_store_tokenizer said so
    const std::string difference = data::identity_difference(*identity, *store_identity);
    if (difference.empty() || d.allow_tokenizer_mismatch) continue;
    throw InputError(where + ": the store '" + store + "' was made with another tokenizer than data.store's '" +
                     d.store + "' (" + difference + "); prepare every source with one tokenizer (segtrain prepare "
                     "--tokenizer), or set data.allow_tokenizer_mismatch: true if this is deliberate");
  }
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
  const bool bf16_base = param_dtype_ == Precision::bf16 && converted_from_base_;
  for (auto& p : model_->parameters()) {
    const auto dtype = !p.requires_grad() && bf16_base ? at::kBFloat16 : at::kFloat;
    if (p.scalar_type() != dtype) p.set_data(p.detach().to(dtype));
  }
}

// The model converters of the run's config (models/modules/converters/), applied before
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
  checkpoint_parts_.push_back(std::make_unique<RandomStatePart>(device_));
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
  loader_options.micro_batch_size = batch_.micro_batch_size;
  loader_options.start = state_.cursor;
  // A new run: every source at its start, in the state too (a stop before step 1 saves it).
  if (loader_options.start.sources.empty()) {
    loader_options.start.sources.assign(data::data_sources(c_.data).size(), data::Cursor{});
    state_.cursor = loader_options.start;
  }
  loader_options.threads = 1;
  sources_ = std::make_unique<data::SourceStores>(c_.data);
  loader_ = std::make_unique<data::Loader>(sources_->sources(), c_.data, loader_options);
  plan_ = plan_training(c_, loader_->samples_per_epoch(), loader_->sample_length(), batch_.global(dist_.world_size));
  count_source_tokens();
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
  resolved.train.param_dtype = param_dtype_;
  // The batch as this run steps it (micro_batch_size auto measured, grad_accum from the global batch).
  resolved.train.micro_batch_size = batch_.micro_batch_size;
  resolved.train.grad_accum = batch_.grad_accum;
  resolved.train.global_batch_size.reset();
  resolved.train.batch_memory_gib.reset();
  // What the run read, as folders that mean the same from any working directory (generate,
  // eval and export follow them from its config.yaml).
  resolved.data.store = absolute_folder(c_.data.store);
  for (auto& source : resolved.data.mixture)
    if (!source.store.empty()) source.store = absolute_folder(source.store);
  resolved.model.init = with_absolute_folder(c_.model.init);
  if (writer_) write_file_atomic(run_.dir / "config.yaml", to_yaml(resolved));
  log_sources();
  // Whether bf16 on this CPU computes in bf16 is part of what the run will cost (cpu_matmul.h).
  const bool bf16_on_cpu = device_.is_cpu() && c_.train.precision == Precision::bf16;
  const std::string fused = kernels::describe_fused_kernels(device_.is_cuda());
  // What auto decided for a bf16 run on a GPU (config.h, param_dtype_of).
  const std::string storage =
      c_.train.param_dtype || !device_.is_cuda() || c_.train.precision != Precision::bf16 ? ""
      : param_dtype_ == Precision::bf16 ? "; bf16 parameters, fp32 master weights (train.param_dtype auto)"
                                        : "; fp32 parameters (train.param_dtype auto: eval.precision fp32 needs them)";
  // How the global batch goes through, where the config did not say it in numbers.
  const std::string batch =
      c_.train.micro_batch_size && !c_.train.global_batch_size ? ""
      : "; micro-batch " + (auto_batch_ ? "auto: " + auto_batch_->describe() : std::to_string(batch_.micro_batch_size)) +
            " x grad_accum " + std::to_string(batch_.grad_accum) + " x " + std::to_string(dist_.world_size) +
            (dist_.world_size == 1 ? " rank" : " ranks");
  const std::string checkpointing =
      auto_checkpointing_ ? "; activation checkpointing auto: " + auto_checkpointing_->describe() : "";
  log::info("plan: ", plan_.total_steps, " steps of ", plan_.global_batch, " x ", plan_.sample_length, " tokens = ",
            plan_.total_steps * plan_.tokens_per_step, " tokens (", epochs_text(), "); model ", model_config_.d_model, "x", model_config_.n_layers, " ",
            enum_name(models::kArchs, model_config_.arch), " on ", device_.str(), ", ", at::get_num_threads(),
            " threads; lr ", format_double(lr_of(c_)), " after ", warmup_steps_of(c_, plan_.total_steps),
            " warm-up steps", c_.train.lr ? "" : from_pretrained(c_) ? " (auto: a pretrained base's)" : " (auto)",
            batch, checkpointing, bf16_on_cpu ? "; " + describe(cpu_matmul(/*log_choice=*/false)) : "", storage,
            fused.empty() ? "" : "; " + fused, describe_cuda_graph().empty() ? "" : "; " + describe_cuda_graph());
  metrics_ = std::make_unique<Metrics>(writer_ ? run_.dir : fs::path(), c_.train.tensorboard, state_.step,
                                       plan_.total_steps);
}

// A mixture counts each source's tokens from the start (a resumed run goes on with its checkpoint's).
void Trainer::count_source_tokens() {
  if (c_.data.mixture.empty()) return;
  std::vector<std::pair<std::string, int64_t>> counts;
  for (const auto& stream : loader_->streams()) counts.emplace_back(stream->setting().name, 0);
  if (state_.source_tokens.empty()) {
    state_.source_tokens = counts;
    return;
  }
  auto names = [](const auto& list) {
    std::string out;
    for (const auto& [name, tokens] : list) out += (out.empty() ? "" : ", ") + name;
    return out;
  };
  if (names(state_.source_tokens) != names(counts))
    throw InputError("--resume: " + run_.resume_from->dir.string() + " counted the sources " +
                     names(state_.source_tokens) + ", this run's data.mixture has " + names(counts) +
                     " (data.mixture must stay as it was)");
}

// "0.433 epochs of 1182 windows"; a mixture's expected epochs of each source.
std::string Trainer::epochs_text() const {
  std::ostringstream out;
  out << std::setprecision(3);
  const auto& streams = loader_->streams();
  if (streams.size() == 1) {
    out << plan_.epochs << " epochs of " << plan_.samples_per_epoch << " windows";
    return out.str();
  }
  double total = 0;
  for (const auto& s : streams) total += s->setting().weight;
  const auto samples = static_cast<double>(plan_.total_steps * plan_.global_batch);
  out << "expected";
  for (size_t i = 0; i < streams.size(); ++i)
    out << (i ? ", " : " ") << streams[i]->setting().name << " "
        << samples * streams[i]->setting().weight / total / static_cast<double>(streams[i]->samples_per_epoch())
        << " epochs of " << streams[i]->samples_per_epoch() << " windows";
  return out.str();
}

// Each source's windows, and for a mixture its share, L_e and sampler.
void Trainer::log_sources() const {
  const auto& streams = loader_->streams();
  if (c_.data.mixture.empty())
    return log::info("run ", c_.run.name, ": ", data::describe(loader_->windows().stats, c_.data.extended_length));
  double total = 0;
  for (const auto& s : streams) total += s->setting().weight;
  for (std::size_t i = 0; i < streams.size(); ++i) {
    const auto& setting = streams[i]->setting();
    const auto& sampler = setting.data.sampler;
    const data::SamplerKind& kind = data::sampler_kind(sampler);
    std::ostringstream share;
    share << std::setprecision(3) << 100.0 * setting.weight / total;
    log::info("run ", c_.run.name, ": source ", setting.name, " (", share.str(), "% of the samples, ", sampler.method,
              kind.settings ? kind.settings(sampler) : "", ", L_e ", setting.data.extended_length, "): ",
              data::describe(streams[i]->windows().stats, setting.data.extended_length));
  }
}

// Data parallel, or with bf16 parameters, the parameters live in flat buckets
// (flat_buckets.h); GradientSync sums (sharded: reduce-scatters) their
// gradients over ranks while backward runs. bf16 parameters take their fp32
// master weights from the values they are rounded from; in one process their
// gradients go straight into the master's fp32 sums as backward makes them
// (no bf16 gradient buffer: ShardedAdamWSetup::sums_in_backward).
void Trainer::set_up_optimizer(const std::vector<std::pair<std::string, at::Tensor>>& named) {
  const bool bf16 = param_dtype_ == Precision::bf16;
  const bool shard = group_ && c_.distributed.shard_optimizer;
  const bool sums_in_backward = bf16 && !group_;
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
                                          bf16 ? std::optional(at::kBFloat16) : std::nullopt,
                                          /*gradient_buffers=*/!sums_in_backward);
  if (bf16 || shard) {
    optimizer_ = std::make_unique<ShardedAdamW>(named, adamw_options(c_), *flat_,
                                                ShardedAdamWSetup{group_.get(), shard, std::move(fp32_values),
                                                                  sums_in_backward});
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

}  // namespace segtrain::trainer
