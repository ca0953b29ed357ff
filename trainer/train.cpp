// The training loop of `segtrain train`, readable top to bottom: set up, plan the
// compute budget, then for each optimizer step fetch the micro-batches, take the
// masked cross-entropy over the loss tokens of the whole step, clip, update,
// log, checkpoint, evaluate.
#include "trainer/train.h"

#include <ATen/autocast_mode.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <unistd.h>
#if SEGTRAIN_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <thread>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/log.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "data/tokenizer.h"
#include "data/token_store.h"
#include "models/model_io.h"
#include "models/positions.h"
#include "trainer/checkpoint.h"
#include "trainer/distributed.h"
#include "trainer/evaluate.h"
#include "trainer/model_setup.h"
#include "trainer/optimizer.h"
#include "trainer/passkey.h"
#include "trainer/schedule.h"
#include "trainer/signals.h"
#include "trainer/step_loss.h"
#include "trainer/tensorboard.h"

namespace segtrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;

// How long the run is: seed 004's compute-equivalent rule or a token budget,
// rounded up to whole global batches.
struct Plan {
  int64_t samples_per_epoch = 0;
  int64_t sample_length = 0;
  int64_t global_batch = 0;     // sequences per optimizer step, all ranks
  int64_t tokens_per_step = 0;  // global_batch * sample_length
  double epochs = 0;
  int64_t total_steps = 0;
};

Plan make_plan(const Config& c, int64_t samples_per_epoch, int64_t sample_length, int64_t world_size) {
  Plan p;
  p.samples_per_epoch = samples_per_epoch;
  p.sample_length = sample_length;
  p.global_batch = c.train.micro_batch_size * c.train.grad_accum * world_size;
  p.tokens_per_step = p.global_batch * sample_length;
  if (samples_per_epoch == 0)
    throw InputError("data.store: the train split has no document of at least data.extended_length = " +
                     std::to_string(c.data.extended_length) + " tokens, so there is nothing to train on");
  if (c.train.budget.tokens) {
    p.total_steps = (*c.train.budget.tokens + p.tokens_per_step - 1) / p.tokens_per_step;
    p.epochs = static_cast<double>(p.total_steps * p.global_batch) / samples_per_epoch;
  } else {
    p.epochs = data::compute_equivalent_epochs(c.data);
    const auto samples = static_cast<int64_t>(std::ceil(p.epochs * samples_per_epoch - 1e-9));
    p.total_steps = (samples + p.global_batch - 1) / p.global_batch;
  }
  return p;
}

// Each process of a node takes the GPU of its LOCAL_RANK (0 for one process).
torch::Device pick_device(Device wanted, int64_t local_rank) {
  const bool cuda = torch::cuda::is_available();
  if (wanted == Device::cuda && !cuda)
    throw InputError(std::string("run.device: cuda requested but ") +
                     (SEGTRAIN_WITH_CUDA ? "no CUDA device is visible" : "this build of LibTorch has no CUDA"));
  if (wanted == Device::cpu || (wanted == Device::auto_select && !cuda)) return torch::Device(torch::kCPU);
  const int64_t visible = torch::cuda::device_count();
  if (local_rank >= visible)
    throw InputError("LOCAL_RANK=" + std::to_string(local_rank) + ": only " + std::to_string(visible) +
                     " CUDA devices are visible to this process");
  const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
#if SEGTRAIN_WITH_CUDA
  c10::cuda::set_device(device.index());  // NCCL and new CUDA tensors use the current device
#endif
  return device;
}

int64_t thread_count(int64_t configured) {
  if (configured > 0) return configured;
  return std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
}

// bf16 autocast for the forward pass; positional math inside the model stays fp32.
class Autocast {
 public:
  Autocast(bool enabled, at::DeviceType device) : enabled_(enabled), device_(device) {
    if (!enabled_) return;
    at::autocast::set_autocast_dtype(device_, at::kBFloat16);
    at::autocast::set_autocast_enabled(device_, true);
  }
  ~Autocast() {
    if (!enabled_) return;
    at::autocast::set_autocast_enabled(device_, false);
    at::autocast::clear_cache();
  }

 private:
  bool enabled_;
  at::DeviceType device_;
};

// Global-norm clipping with two foreach kernels instead of a loop over parameters.
double clip_gradients(const std::vector<at::Tensor>& params, double max_norm) {
  std::vector<at::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
  const double norm = at::stack(at::_foreach_norm(grads, 2, at::kFloat)).norm().item<double>();
  if (max_norm > 0 && std::isfinite(norm) && norm > max_norm) at::_foreach_mul_(grads, max_norm / (norm + 1e-6));
  return norm;
}

// metrics.jsonl, TensorBoard and the console progress line.
class Metrics {
 public:
  // An empty run_dir (ranks other than 0) records nothing and only logs.
  Metrics(const fs::path& run_dir, bool tensorboard, int64_t resume_step, int64_t total_steps)
      : path_(run_dir.empty() ? fs::path() : run_dir / "metrics.jsonl"),
        total_steps_(total_steps),
        live_(!run_dir.empty() && ::isatty(STDERR_FILENO) != 0) {
    if (run_dir.empty()) return;
    keep_lines_up_to(resume_step);
    out_.open(path_, std::ios::app);
    if (!out_) throw std::runtime_error("cannot write '" + path_.string() + "'");
    if (tensorboard) tb_ = std::make_unique<TensorBoardWriter>(run_dir / "tensorboard");
  }
  ~Metrics() {
    if (live_ && printed_live_) std::cerr << "\n";
  }

  void record(const nlohmann::json& row, double seconds_left) {
    if (out_.is_open()) {
      out_ << row.dump() << "\n";
      out_.flush();
    }
    const int64_t step = row["step"];
    if (tb_) {
      for (const char* key : {"loss", "lr", "grad_norm", "tokens_per_s"})
        if (row[key].is_number()) tb_->scalar(std::string("train/") + key, row[key].get<double>(), step);
      tb_->flush();
    }
    std::ostringstream line;
    const double loss = row["loss"].is_number() ? row["loss"].get<double>() : std::nan("");
    line << "step " << step << "/" << total_steps_ << "  loss " << std::fixed << std::setprecision(4) << loss << "  lr " << std::scientific << std::setprecision(2) << row["lr"].get<double>()
         << "  " << std::fixed << std::setprecision(0) << row["tokens_per_s"].get<double>() << " tok/s  ETA "
         << format_duration(seconds_left);
    if (live_) {
      std::cerr << "\r\033[K" << line.str() << std::flush;
      printed_live_ = true;
    } else {
      log::info(line.str());
    }
  }

  void eval_scalars(const std::vector<LengthResult>& results, int64_t step) {
    if (!tb_) return;
    for (const auto& r : results)
      if (std::isfinite(r.ppl)) tb_->scalar("eval/ppl@" + std::to_string(r.length), r.ppl, step);
    tb_->flush();
  }

  void newline() {
    if (live_ && printed_live_) std::cerr << "\n", printed_live_ = false;
  }

 private:
  static std::string format_duration(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0) return "?";
    const auto s = static_cast<int64_t>(seconds);
    std::ostringstream out;
    if (s >= 3600) out << s / 3600 << "h";
    out << (s % 3600) / 60 << "m" << std::setw(2) << std::setfill('0') << s % 60 << "s";
    return out.str();
  }
  // After a resume, metrics of steps past the checkpoint are replayed, so drop them.
  void keep_lines_up_to(int64_t step) {
    if (!fs::exists(path_)) return;
    std::ifstream in(path_);
    std::string kept, line;
    while (std::getline(in, line)) {
      try {
        if (nlohmann::json::parse(line).value("step", int64_t{0}) <= step) kept += line + "\n";
      } catch (const nlohmann::json::exception&) {
      }
    }
    write_file_atomic(path_, kept);
  }

  fs::path path_;
  int64_t total_steps_;
  bool live_;
  bool printed_live_ = false;
  std::ofstream out_;
  std::unique_ptr<TensorBoardWriter> tb_;
};

std::string where(const LoadedConfig& loaded, const std::string& key) {
  auto it = loaded.origins.find(key);
  return (it != loaded.origins.end() ? it->second : loaded.source + " (default)") + ": " + key;
}

PerplexityOptions eval_options(const Config& c) {
  PerplexityOptions o;
  o.lengths = c.eval.lengths;
  o.max_sequences = c.eval.max_sequences;
  o.stride = c.eval.stride;
  o.batch_size = c.eval.batch_size;
  o.per_position = c.eval.per_position;
  return o;
}

void write_eval(const fs::path& run_dir, const Config& c, const std::vector<LengthResult>& results,
                const std::vector<PasskeyResult>& passkey) {
  write_file_atomic(run_dir / "eval.json", eval_json(c.run.name, results, passkey));
  if (c.eval.per_position) {
    write_file_atomic(run_dir / "eval_per_position.csv", per_position_csv(results));
    write_file_atomic(run_dir / "eval_per_position.svg", per_position_svg(results, c.run.name));
  }
  for (const auto& r : results)
    log::info("eval ", c.eval.split, " L=", r.length, ": ppl ", r.ppl, " over ", r.tokens, " tokens (", r.sequences,
              " sequences)");
  for (const auto& p : passkey)
    log::info("passkey L=", p.length, ": ", p.correct, "/", p.trials, " correct");
}

}  // namespace

int run_training(const LoadedConfig& loaded, bool resume_requested, bool final_eval) {
  const Config& c = loaded.config;
  const fs::path run_dir = c.run.output_dir;
  install_stop_handlers();
  const DistributedEnv dist = read_distributed_env();
  const int64_t rank = dist.rank, world_size = dist.world_size;
  const bool writer = rank == 0;  // rank 0 writes the run directory

  // --- set up -----------------------------------------------------------------
  const auto previous = newest_checkpoint(run_dir);
  // A launcher restart (segtrain-launch, torchrun) continues the interrupted run.
  const bool resume = resume_requested || (dist.restart > 0 && previous.has_value());
  if (!resume && previous)
    throw InputError("run.output_dir: '" + run_dir.string() + "' already holds a run (" + previous->dir.string() +
                     "); use --resume to continue it or choose another output_dir");
  if (resume && !previous)
    throw InputError("--resume: '" + run_dir.string() + "' has no complete checkpoint to continue from");
  if (resume) check_resume_compatible(previous->dir, c, world_size);
  fs::create_directories(run_dir);
  log::Options log_options;
  log_options.level = c.run.log_level;
  log_options.rank = static_cast<int>(rank);
  if (writer) log_options.file = (run_dir / "train.log").string();
  if (c.run.log_all_ranks) {
    fs::create_directories(run_dir / "logs");
    log_options.file = (run_dir / "logs" / ("rank-" + std::to_string(rank) + ".log")).string();
  }
  log::init(log_options);
  const torch::Device device = pick_device(c.run.device, dist.local_rank);
  const std::unique_ptr<ProcessGroup> group = connect(dist, c.distributed, device);
  if (group) log::info("rank ", rank, " of ", world_size, " connected through ", dist.master_addr, ":", dist.master_port);
  at::set_num_threads(static_cast<int>(thread_count(c.run.threads)));

  const data::TokenStore store = data::TokenStore::open(c.data.store);
  if (c.eval.passkey_trials > 0 && !fs::exists(fs::path(c.data.store) / "tokenizer.model"))
    throw InputError(where(loaded, "eval.passkey_trials") + ": the store '" + c.data.store +
                     "' has no sentencepiece tokenizer.model to write passkey prompts with");
  const models::ModelConfig model_config = resolve_model_config(loaded, store.vocab_size());
  // A learned table has no rows past its end: say so now, not after training.
  if (models::position_scheme(model_config.arch) == models::PositionScheme::learned)
    for (int64_t length : c.eval.lengths)
      if (length > models::ape_rows(model_config))
        throw InputError(where(loaded, "eval.lengths") + ": length " + std::to_string(length) +
                         " is longer than the model's " + std::to_string(models::ape_rows(model_config)) +
                         " positions; evaluate an extended model (model.extension.method: interpolate) or drop it");
  models::TransformerLM model = build_model(loaded, model_config);
  model->to(device);
  model->train();
  std::vector<std::pair<std::string, at::Tensor>> named;
  std::vector<at::Tensor> params;
  for (const auto& item : model->named_parameters()) named.emplace_back(item.key(), item.value()), params.push_back(item.value());
  if (group) {  // every rank starts from rank 0's weights
    std::vector<at::Tensor> data;
    for (const auto& p : params) data.push_back(p.detach());
    group->broadcast(data);
  }
  // Sums gradients over ranks in buckets while the step's last backward runs.
  std::unique_ptr<GradientSync> sync;
  if (group)
    sync = std::make_unique<GradientSync>(*group, params, static_cast<int64_t>(c.distributed.bucket_mb * (1 << 20)));
  AdamWOptions adamw;
  adamw.lr = c.train.lr;
  adamw.beta1 = c.train.betas[0];
  adamw.beta2 = c.train.betas[1];
  adamw.eps = c.train.eps;
  adamw.weight_decay = c.train.weight_decay;
  adamw.no_decay = c.train.no_decay;
  FusedAdamW optimizer(named, adamw);

  TrainerState state;
  state.world_size = world_size;
  if (resume) {
    load_checkpoint(previous->dir, model, optimizer);
    state = previous->state;
    log::info("resuming from ", previous->dir.string(), " at step ", state.step);
  }

  data::LoaderOptions loader_options;
  loader_options.seed = static_cast<uint64_t>(c.run.seed);
  loader_options.rank = rank;
  loader_options.world_size = world_size;
  loader_options.micro_batch_size = c.train.micro_batch_size;
  loader_options.start = state.cursor;
  loader_options.threads = 1;
  data::Loader loader(store, c.data, loader_options);
  const Plan plan = make_plan(c, loader.samples_per_epoch(), loader.sample_length(), world_size);
  state.total_steps = plan.total_steps;
  const LrSchedule schedule{c.train.schedule, c.train.lr, c.train.min_lr, c.train.warmup_steps, plan.total_steps};

  Config resolved = c;
  resolved.model.spec = model_config;
  if (writer) write_file_atomic(run_dir / "config.yaml", to_yaml(resolved));
  log::info("run ", c.run.name, ": ", data::describe(loader.windows().stats, c.data.extended_length));
  log::info("plan: ", plan.total_steps, " steps of ", plan.global_batch, " x ", plan.sample_length, " tokens = ",
            plan.total_steps * plan.tokens_per_step, " tokens (", std::setprecision(3), plan.epochs, " epochs of ",
            plan.samples_per_epoch, " windows); model ", model_config.d_model, "x", model_config.n_layers, " ",
            enum_name(models::kArchs, model_config.arch), " on ", device.str(), ", ", at::get_num_threads(), " threads");
  Metrics metrics(writer ? run_dir : fs::path(), c.train.tensorboard, state.step, plan.total_steps);
  // Rank 0 writes; the others wait so nobody runs ahead of a checkpoint.
  auto save = [&](const fs::path& dir) {
    if (writer) {
      save_checkpoint(dir, model, optimizer, state, c);
      prune_checkpoints(run_dir, c.train.keep_last);
    }
    if (group) group->barrier();
  };
  auto save_step = [&] { save(run_dir / "checkpoints" / ("step-" + std::to_string(state.step))); };
  // Sums over ranks (identity for one process), so every rank takes the same decisions.
  auto global_sum = [&](std::vector<double> values) {
    if (!group) return values;
    std::vector<at::Tensor> t{at::tensor(values, at::kDouble)};
    group->all_reduce_sum(t);
    return std::vector<double>(t[0].data_ptr<double>(), t[0].data_ptr<double>() + values.size());
  };

  // --- train ------------------------------------------------------------------
  const bool bf16 = c.train.precision == Precision::bf16;
  auto window_start = Clock::now();
  int64_t window_tokens = 0, window_steps = 0;
  while (state.step < plan.total_steps) {
    // Every rank stops at the same step when any of them was signalled.
    int signal = stop_signal();
    if (group && global_sum({static_cast<double>(signal)})[0] > 0 && signal == 0) signal = SIGTERM;
    if (signal) {
      metrics.newline();
      save_step();
      log::warn("signal ", signal, ": saved step ", state.step, "; continue with --resume");
      throw Interrupted(signal);
    }
    const double lr = schedule.at(state.step);

    // The loss is the mean over the loss tokens of the whole step, so each
    // micro-batch's summed loss is divided by the step's token count.
    std::vector<MicroBatch> micro;
    data::Cursor cursor_after;
    int64_t step_loss_tokens = 0;
    for (int64_t k = 0; k < c.train.grad_accum; ++k) {
      data::Batch batch = loader.next();
      cursor_after = batch.cursor;
      micro.push_back(to_tensors(batch, device));
      step_loss_tokens += micro.back().loss_tokens;
    }
    step_loss_tokens = static_cast<int64_t>(global_sum({static_cast<double>(step_loss_tokens)})[0]);
    const double denominator = static_cast<double>(std::max<int64_t>(step_loss_tokens, 1));
    double loss_sum = 0;
    for (size_t k = 0; k < micro.size(); ++k) {
      at::Tensor logits;
      {
        Autocast autocast(bf16, device.type());
        logits = model->forward(micro[k].tokens, micro[k].positions);
      }
      at::Tensor loss = summed_loss(logits, micro[k].targets);
      if (sync && k + 1 == micro.size()) sync->arm();  // the last micro-batch's backward all-reduces
      (loss / denominator).backward();
      loss_sum += loss.item<double>();
    }
    if (sync) sync->finish();
    const double mean_loss = global_sum({loss_sum})[0] / denominator;
    state.cursor = cursor_after;
    state.tokens += plan.tokens_per_step;
    state.loss_tokens += step_loss_tokens;

    // A non-finite loss or gradient never reaches the weights; a step without
    // loss tokens (possible with prefix) has nothing to learn from.
    const double grad_norm = std::isfinite(mean_loss) ? clip_gradients(params, c.train.grad_clip) : mean_loss;
    if (!std::isfinite(mean_loss) || !std::isfinite(grad_norm)) {
      ++state.skipped_steps;
      ++state.consecutive_bad_steps;
      log::warn("step ", state.step + 1, ": non-finite ", std::isfinite(mean_loss) ? "gradient norm" : "loss",
                "; step skipped (", state.consecutive_bad_steps, " in a row)");
      if (state.consecutive_bad_steps >= c.train.max_bad_steps)
        throw std::runtime_error("aborting: " + std::to_string(state.consecutive_bad_steps) +
                                 " consecutive steps had a non-finite loss (train.max_bad_steps); check the learning "
                                 "rate, the precision and the initial weights");
    } else {
      state.consecutive_bad_steps = 0;
      if (step_loss_tokens > 0) optimizer.step(lr);
    }
    optimizer.zero_grad();
    ++state.step;

    window_tokens += plan.tokens_per_step;
    ++window_steps;
    const bool last = state.step == plan.total_steps;
    if (state.step % c.train.log_every == 0 || last) {
      const double seconds = std::chrono::duration<double>(Clock::now() - window_start).count();
      const double seconds_per_step = seconds / std::max<int64_t>(window_steps, 1);
      metrics.record({{"step", state.step},
                      {"tokens", state.tokens},
                      {"loss", mean_loss},
                      {"lr", lr},
                      {"grad_norm", grad_norm},
                      {"tokens_per_s", window_tokens / std::max(seconds, 1e-9)},
                      {"loss_tokens", step_loss_tokens},
                      {"skipped_steps", state.skipped_steps}},
                     seconds_per_step * static_cast<double>(plan.total_steps - state.step));
      window_start = Clock::now();
      window_tokens = window_steps = 0;
    }
    if (c.train.checkpoint_every > 0 && state.step % c.train.checkpoint_every == 0 && !last) save_step();
    if (c.train.eval_every > 0 && state.step % c.train.eval_every == 0 && !last) {
      metrics.newline();
      try {
        const auto results = evaluate(model, store.split(data::parse_split(c.eval.split)), eval_options(c));
        metrics.eval_scalars(results, state.step);
        for (const auto& r : results) log::info("step ", state.step, " eval L=", r.length, " ppl ", r.ppl);
      } catch (const Interrupted& stop) {
        save_step();  // the signal arrived during evaluation: keep this step's state
        log::warn("signal ", stop.signal, ": saved step ", state.step, "; continue with --resume");
        throw;
      }
    }
  }
  metrics.newline();

  // --- finish -----------------------------------------------------------------
  save(run_dir / "final");
  if (world_size > 1 || c.run.log_all_ranks) {
    double checksum = 0;
    for (const auto& p : params) checksum += p.detach().to(at::kDouble).sum().item<double>();
    log::info("rank ", rank, " final parameter checksum ", std::setprecision(17), checksum);
  }
  log::info("trained ", state.step, " steps, ", state.tokens, " tokens (", state.loss_tokens, " in the loss, ",
            state.skipped_steps, " steps skipped); saved ", (run_dir / "final").string());
  if (!final_eval) {
    if (int signal = stop_signal()) throw Interrupted(signal);
    return 0;
  }
  const auto results = evaluate(model, store.split(data::parse_split(c.eval.split)), eval_options(c));
  metrics.eval_scalars(results, state.step);
  if (writer) write_eval(run_dir, c, results, {});  // perplexity is kept even if the passkey test fails
  if (c.eval.passkey_trials > 0 && writer) {
    const auto tokenizer = data::Tokenizer::load((fs::path(c.data.store) / "tokenizer.model").string());
    write_eval(run_dir, c, results,
               passkey_accuracy(model, tokenizer, c.eval.passkey_style, c.eval.lengths, c.eval.passkey_trials,
                                static_cast<uint64_t>(c.run.seed)));
  }
  if (int signal = stop_signal()) throw Interrupted(signal);  // final/ is saved
  return 0;
}

}  // namespace segtrain::trainer
