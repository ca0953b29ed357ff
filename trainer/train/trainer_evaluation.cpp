// The run's evaluations (trainer_class.h): the periodic one during training and the final one
// into eval.json, each a suite of eval tasks; what the final one will cost, said before training;
// and how to run it again when a signal stops it. A stop is checked between batches and agreed
// by all ranks, as a step's is.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/file_io.h"
#include "common/log.h"
#include "common/signals.h"
#include "trainer/config/model_ref.h"
#include "trainer/eval/eval_outputs.h"
#include "trainer/runtime/device.h"
#include "trainer/runtime/memory.h"
#include "trainer/train/trainer_class.h"

namespace segtrain::trainer {

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

}  // namespace segtrain::trainer
