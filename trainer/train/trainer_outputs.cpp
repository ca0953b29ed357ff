// What a run writes as it goes and at its end (trainer_class.h): a metrics row per logged step,
// the checkpoints every rank saves its share of, final/, and the summary a user reads last.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <string>

#include "common/error.h"
#include "common/log.h"
#include "trainer/runtime/memory.h"
#include "trainer/train/trainer_class.h"

namespace segtrain::trainer {

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
  if (!state_.source_tokens.empty()) {  // a mixture: each source's tokens so far, all ranks
    nlohmann::json sources = nlohmann::json::object();
    for (const auto& [name, tokens] : state_.source_tokens) sources[name] = tokens;
    row["source_tokens"] = sources;
  }
  if (!step.source_loss_tokens.empty()) {  // and the step's loss on each source's tokens (null: none)
    nlohmann::json losses = nlohmann::json::object(), tokens = nlohmann::json::object();
    for (size_t i = 0; i < step.source_loss_tokens.size(); ++i) {
      const std::string& name = state_.source_tokens[i].first;
      const int64_t count = step.source_loss_tokens[i];
      losses[name] = count > 0 ? nlohmann::json(step.source_loss_sums[i] / static_cast<double>(count)) : nlohmann::json();
      tokens[name] = count;
    }
    row["source_loss"] = losses;
    row["source_loss_tokens"] = tokens;
  }
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

void Trainer::save_final() {
  // Evaluating and exporting need the model alone; AdamW's moments are twice its size.
  save(run_.dir / "final", c_.train.final_optimizer_state, /*wait=*/true);
  if (dist_.world_size > 1 || c_.run.log_all_ranks) {
    double checksum = 0;
    for (const auto& p : model_->parameters()) checksum += p.detach().to(at::kDouble).sum().item<double>();
    log::info("rank ", dist_.rank, " final parameter checksum ", std::setprecision(17), checksum);
  }
  std::string sources;
  for (const auto& [name, tokens] : state_.source_tokens)
    sources += (sources.empty() ? "; " : ", ") + name + " " + std::to_string(tokens);
  log::info("trained ", state_.step, " steps, ", state_.tokens, " tokens (", state_.loss_tokens, " in the loss, ",
            state_.skipped_steps, " steps skipped", sources, "); saved ", (run_.dir / "final").string());
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

}  // namespace segtrain::trainer
